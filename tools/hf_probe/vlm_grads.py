"""Which vision-tower parameters of a tiny llava get a gradient (FINDINGS R-VLM-9): the
layers after the deepest vision_feature_layer and post_layernorm run but reach no loss, so
their .grad stays None and AdamW keeps no state for them. For vision_feature_layer -2, -1,
1 and [-3, 1], checkpointing off and on (non-reentrant): the parameters without a
gradient must be exactly those, and fused AdamW's state bytes 8 per element + 4 (the fp32
step) per tensor of the others. Exits 1 on a difference.

    make -C tools/hf_probe vlm-grads     (seconds, CPU)
"""
import sys

import torch
import transformers

import vlm_cases as vc


def expected_no_grad(names, layers: int, depth: int) -> set:
    return {n for n in names if n.startswith("model.vision_tower.post_layernorm.")
            or any(n.startswith(f"model.vision_tower.encoder.layers.{i}.") for i in range(depth, layers))}


def main() -> int:
    bad = 0
    for fl in (-2, -1, 1, [-3, 1]):
        for gc in (False, True):
            d = dict(vc.VARIANTS["llava"])
            mt = d.pop("model_type")
            d["vision_feature_layer"] = fl
            cfg = transformers.AutoConfig.for_model(mt, **d)
            cfg._attn_implementation = "sdpa"
            torch.manual_seed(0)
            model = transformers.LlavaForConditionalGeneration(cfg)
            model.config.use_cache = False
            model.train()
            if gc:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            ids, labels, px = vc.make_batch("llava", torch.Generator().manual_seed(0))
            model(input_ids=ids, labels=labels, **px).loss.backward()
            layers = cfg.vision_config.num_hidden_layers
            depth = max((f + layers + 1) if f < 0 else f for f in ([fl] if isinstance(fl, int) else fl))
            params = dict(model.named_parameters())
            none = {n for n, p in params.items() if p.grad is None}
            want = expected_no_grad(params, layers, depth)
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], fused=True)
            opt.step()
            state = sum(sum(t.numel() * t.element_size() for t in s.values()) for s in opt.state.values())
            with_grad = [p for p in model.parameters() if p.grad is not None]
            want_state = 8 * sum(p.numel() for p in with_grad) + 4 * len(with_grad)
            ok = none == want and state == want_state
            bad += not ok
            print(f"vision_feature_layer {fl!s:8} checkpointing {gc!s:5}: {len(none)} tensors "
                  f"({sum(params[n].numel() for n in none)} elements) without a gradient, "
                  f"AdamW state {state} bytes ({len(opt.state)} tensors): {'ok' if ok else 'DIFFERS'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
