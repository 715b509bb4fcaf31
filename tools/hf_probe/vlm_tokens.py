"""The image-token counts tests/test_vision.c checks gckpt against (FINDINGS R-VLM-4),
from transformers' own functions run alone (the processors cannot be built in the probe
venv: no Pillow / torchvision): Qwen2VLImageProcessor's smart_resize and LlavaNextProcessor's
_get_number_of_features with select_best_resolution, each extracted from the installed
source with ast and executed without its module's imports.

    make -C tools/hf_probe vlm-tokens     (seconds)
"""
import ast
import math
import pathlib
import types

import transformers

ROOT = pathlib.Path(transformers.__file__).parent


def grab(path: str, names: set, cls: str | None = None) -> dict:
    tree = ast.parse((ROOT / path).read_text())
    body = tree.body
    if cls:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    ns = {"math": math}
    exec(compile(ast.Module([n for n in body if isinstance(n, ast.FunctionDef) and n.name in names], []), path, "exec"),
         ns)
    return ns


def main() -> None:
    smart_resize = grab("models/qwen2_vl/image_processing_qwen2_vl.py", {"smart_resize"})["smart_resize"]
    print("qwen2_5_vl (smart_resize, factor 28, the class's pixel budget): h, w, tokens")
    for h, w in [(1080, 1920), (56, 84), (42, 42), (70, 70), (14, 14), (1, 200), (3000, 4000), (98, 126),
                 (4032, 3024), (10, 2000), (28, 5600), (1, 201)]:
        try:
            hb, wb = smart_resize(h, w)
            print(f"  {{{h}, {w}, {(hb // 14) * (wb // 14) // 4}}},")
        except ValueError as e:
            print(f"  {h} x {w}: ValueError: {e}")
    print("qwen3_vl (smart_resize, factor 32: patch 16, merge 2): h, w, tokens")
    for h, w in [(64, 96), (1080, 1920)]:
        hb, wb = smart_resize(h, w, factor=32)
        print(f"  {{{h}, {w}, {(hb // 16) * (wb // 16) // 4}}},")
    sbr = grab("image_processing_utils.py", {"select_best_resolution"})["select_best_resolution"]
    proc = grab("models/llava_next/processing_llava_next.py", {"_get_number_of_features", "_get_unpadded_features"},
                "LlavaNextProcessor")
    proc["_get_number_of_features"].__globals__["select_best_resolution"] = sbr

    def tokens(pin, size, patch, h, w):
        self = types.SimpleNamespace(patch_size=patch, num_additional_image_tokens=1,
                                     image_processor=types.SimpleNamespace(image_grid_pinpoints=pin))
        self._get_unpadded_features = lambda *a: proc["_get_unpadded_features"](self, *a)
        return proc["_get_number_of_features"](self, h, w, size, size) - 1  # the default strategy drops the CLS

    tiny = [[28, 56], [56, 28], [56, 56]]
    dflt = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
    for name, pin, size, sizes in [
            ("the tiny fixtures' tower (28 / 14)", tiny, 28, [(40, 60), (28, 28), (60, 40), (100, 10)]),
            ("LlavaNextConfig's default pinpoints at 336 / 14", dflt, 336,
             [(480, 640), (640, 480), (1080, 1920), (336, 336), (100, 1000), (1000, 100), (700, 700), (333, 1001),
              (50, 51), (4000, 3000)])]:
        print(f"llava_next, {name}: h, w, tokens")
        for h, w in sizes:
            print(f"  {{{h}, {w}, {tokens(pin, size, 14, h, w)}}},")


if __name__ == "__main__":
    main()
