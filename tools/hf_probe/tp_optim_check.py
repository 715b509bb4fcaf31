"""FINDINGS R-TP-23: each optimizer gckpt's single-GPU planner supports, on transformers' TP-sharded tiny llama
(from_pretrained(distributed_config=DistributedConfig(tp_size=2)), gloo, 2 processes): one forward and backward,
then optimizer.step(); prints per dtype and optimizer "ok" (with the torch AdamW implementation that ran) or the
exception and the innermost frames. `python tp_optim_check.py [float32] [bfloat16]` (about 5 minutes on 2 shared
cores)."""
import os
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))


def makers():
    import bitsandbytes as bnb

    return {
        # the Trainer's adamw_torch: torch.optim.AdamW with its defaults (foreach=None)
        "adamw_torch (AdamW, foreach=None)": lambda ps: torch.optim.AdamW(ps, lr=1e-3),
        "adamw-foreach (AdamW, foreach=True)": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True),
        "sgd (momentum 0.9)": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9),
        "adamw-8bit (bnb.optim.AdamW8bit)": lambda ps: bnb.optim.AdamW8bit(ps, lr=1e-3),
        "paged-adamw-8bit (bnb.optim.PagedAdamW8bit)": lambda ps: bnb.optim.PagedAdamW8bit(ps, lr=1e-3),
        "paged-adamw-32bit (bnb.optim.PagedAdamW32bit)": lambda ps: bnb.optim.PagedAdamW32bit(ps, lr=1e-3),
    }


def which_adam():
    """Wraps torch's AdamW implementations to record the one that ran."""
    import torch.optim.adam as adam

    ran = []
    for name in ("_single_tensor_adam", "_multi_tensor_adam", "_fused_adam"):
        orig = getattr(adam, name)

        def wrap(*a, _o=orig, _n=name, **k):
            ran.append(_n)
            return _o(*a, **k)

        setattr(adam, name, wrap)
    return ran


def rank_main(rank, world, port, d, dtype):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import transformers
    from transformers.distributed import DistributedConfig

    transformers.logging.set_verbosity_error()
    ran = which_adam()
    for name, mk in makers().items():
        model = transformers.AutoModelForCausalLM.from_pretrained(d, distributed_config=DistributedConfig(tp_size=world),
                                                                  dtype=getattr(torch, dtype))
        ids = torch.randint(3, model.config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
        ran.clear()
        try:
            opt = mk(list(model.parameters()))
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            msg = "ok" + (f" ({', '.join(sorted(set(ran)))})" if ran else "")
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(e.__traceback__)
            base = os.path.dirname(os.path.dirname(torch.__file__))
            where = " <- ".join(f"{os.path.relpath(f.filename, base)}:{f.lineno}" for f in tb[-4:][::-1])
            msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300]} [{where}]"
        if rank == 0:
            print(f"{dtype} {name}: {msg}", flush=True)
    dist.destroy_process_group()


def main():
    sys.path.insert(0, HERE)
    import probe
    from safetensors.torch import save_file

    m = probe.make_model(dict(family="llama", attention="sdpa", config=None))
    d = tempfile.mkdtemp(prefix="gckpt-tpopt-")
    m.config.save_pretrained(d)
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, os.path.join(d, "model.safetensors"))
    for k, dtype in enumerate(sys.argv[1:] or ["float32", "bfloat16"]):
        mp.spawn(rank_main, args=(2, 29600 + k, d, dtype), nprocs=2)


if __name__ == "__main__":
    main()
