#!/usr/bin/env python3
"""LoRA / QLoRA on a model loaded with transformers' tp_plan (FINDINGS R-TP-12..14), over gloo on the CPU.

Every rank loads the probe's tiny llama with from_pretrained(dir, distributed_config=DistributedConfig(tp_size=T))
and wraps it with get_peft_model(LoraConfig(r=8, alpha=16, dropout 0, targets)); the adapters are set to the
same whole tensors on every rank and in one process (each DTensor adapter as its shard), so one forward and
backward on one batch can be compared: the loss and layer 0's adapter gradients (a DTensor's gathered) against
the same model unsharded in one process. Prints each layer-0 adapter's type, global and local shape and
placement, then the comparison, or the exception and where it was raised.

  tp_peft_check.py --targets q_proj,v_proj        # colwise layers only: runs, equal to one process
  tp_peft_check.py --targets all-linear           # o_proj / down_proj (rowwise): the first forward fails
  tp_peft_check.py --qlora                        # nf4 + tp_plan: the base forward and get_peft_model fail
  tp_peft_check.py --fsdp 2                       # TP x FSDP (DistributedConfig(tp_size=2, fsdp_size=2), 4 ranks):
                                                  # the first forward fails (R-TP-16)
  tp_peft_check.py --replicate 2                  # TP x DDP (dp_replicate_size=2): each data-parallel rank its own
                                                  # batch, the Trainer's hook on every plain trainable parameter,
                                                  # against one process on the mean of their losses (R-TP-17)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def build_dir():
    import probe
    from safetensors.torch import save_file

    d = tempfile.mkdtemp(prefix="gckpt-tppeft-")
    m = probe.make_model({"family": "llama", "attention": "eager"})
    m.config.save_pretrained(d)
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, os.path.join(d, "model.safetensors"))
    return d


def lora(model, targets):
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets,
                                            task_type="CAUSAL_LM"))


def set_adapters(pm):
    """Every adapter from the same seeded whole tensor (a DTensor: distributed to its placement)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                v = torch.randn(p.shape, generator=g) * 0.05
                p.copy_(distribute_tensor(v, p.device_mesh, p.placements) if isinstance(p, DTensor) else v)


def where(e):
    tb = traceback.extract_tb(e.__traceback__)
    lib = [fr for fr in tb if "/peft/" in fr.filename or "/transformers/" in fr.filename][-2:]  # the libraries' last
    return "; ".join(f"{fr.filename.split('site-packages/')[-1]}:{fr.lineno} {fr.name}"
                     for fr in tb[-3:] + [fr for fr in lib if fr not in tb[-3:]])


def step(pm, vocab, dp=0):
    ids = torch.randint(3, vocab, (2, 32), generator=torch.Generator().manual_seed(11 + dp))
    out = pm(input_ids=ids, labels=ids)
    out.loss.backward()
    return out.loss.item()


def trainer_hook(pm, d):
    """transformers 5.24 Trainer._sync_replicated_trainable_parameters (trainer.py:2632-2660), the Trainer's own
    method on a Trainer built for the model: every trainable parameter that is not a DTensor broadcast from rank 0,
    its gradient all-reduced (AVG, the whole world) after accumulation (sync_gradients: one micro-step here)."""
    import transformers

    import probe_dist  # accelerate refuses MULTI_CPU with a ParallelismConfig: its check as on GPUs (the probe's)

    probe_dist.gpu_validation(fsdp=False)
    args = transformers.TrainingArguments(output_dir=os.path.join(d, "trainer"), use_cpu=True, report_to=[],
                                          save_strategy="no", per_device_train_batch_size=2)
    tr = transformers.Trainer(model=pm, args=args)
    assert tr.accelerator.sync_gradients
    tr._sync_replicated_trainable_parameters(pm)


def rank_main(rank, world, d, targets, qlora, port, out, fsdp=1, replicate=1):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    warnings.filterwarnings("ignore")
    import transformers
    from torch.distributed.tensor import DTensor
    from transformers.distributed import DistributedConfig

    transformers.logging.set_verbosity_error()
    dist.init_process_group("gloo", rank=rank, world_size=world)
    kw = {}
    if qlora:
        kw = dict(dtype=torch.bfloat16, quantization_config=transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_storage=torch.uint8))
    m = transformers.AutoModelForCausalLM.from_pretrained(
        d, distributed_config=DistributedConfig(tp_size=world // (fsdp * replicate), fsdp_size=fsdp,
                                                dp_replicate_size=replicate), attn_implementation="eager", **kw)
    dp = fsdp * replicate
    say = print if rank == 0 else (lambda *a, **k: None)
    try:
        if qlora:
            w = m.model.layers[0].self_attn.q_proj.weight
            say(f"q_proj {type(m.model.layers[0].self_attn.q_proj).__name__}: weight {type(w).__name__} global "
                f"{tuple(w.shape)}, local {type(w.to_local()).__name__} {w.to_local().dtype} {tuple(w.to_local().shape)}")
            try:
                step(m, m.config.vocab_size)
                say("base forward/backward ran")
            except Exception as e:  # noqa: BLE001 - the measurement
                say(f"base forward FAILED: {type(e).__name__}: {str(e)[:200]} at {where(e)}")
            from peft import prepare_model_for_kbit_training

            m = prepare_model_for_kbit_training(m, use_gradient_checkpointing=False)
        pm = lora(m, targets)
        for n, p in pm.named_parameters():
            if ("lora_" in n or "q_proj.base_layer" in n) and ".layers.0." in n:
                say(f"{n.split('layers.0.')[1]}: {type(p).__name__} {tuple(p.shape)}"
                    + (f" local {tuple(p.to_local().shape)} {p.placements} mesh {p.device_mesh.mesh_dim_names}"
                       if isinstance(p, DTensor) else " plain"))
        if not qlora and fsdp == 1:  # TP x FSDP: the adapters' local shapes are not their DTensor's (R-TP-16)
            set_adapters(pm)
        if dp > 1:
            trainer_hook(pm, d)
        loss = step(pm, m.config.vocab_size, rank // (world // dp))
        grads = {n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).clone()
                 for n, p in pm.named_parameters() if p.requires_grad and ".layers.0." in n}
        if dp > 1:  # what each data-parallel rank's local lora_B gradient is (its TP shard, not gathered)
            for n, p in pm.named_parameters():
                if "lora_B" in n and ".layers.0." in n and isinstance(p.grad, DTensor):
                    grads[n + "#local"] = p.grad.to_local().clone()
        torch.save({"loss": loss, "grads": grads}, os.path.join(out, f"r{rank}.pt"))
    except Exception as e:  # noqa: BLE001 - the measurement
        say(f"FAILED: {type(e).__name__}: {str(e)[:200]} at {where(e)}")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="q_proj,v_proj")
    ap.add_argument("--qlora", action="store_true")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--port", type=int, default=29631)
    ap.add_argument("--fsdp", type=int, default=1, help="fsdp_size: TP x FSDP on tp x fsdp ranks")
    ap.add_argument("--replicate", type=int, default=1, help="dp_replicate_size: TP x DDP (R-TP-11)")
    a = ap.parse_args()
    targets = a.targets if a.targets == "all-linear" else a.targets.split(",")
    d, out = build_dir(), tempfile.mkdtemp(prefix="gckpt-tppeft-out-")
    dp = a.fsdp * a.replicate
    world = a.tp * dp
    mp.spawn(rank_main, args=(world, d, targets, a.qlora, a.port, out, a.fsdp, a.replicate), nprocs=world)
    if not all(os.path.exists(os.path.join(out, f"r{r}.pt")) for r in range(world)):
        return 1
    import transformers

    transformers.logging.set_verbosity_error()
    pm = lora(transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager"), targets)
    set_adapters(pm)
    # one process on every data-parallel rank's batch: the mean of their losses (the replicas' average gradient)
    own, loss = [], 0.0  # each data-parallel batch's own gradients, then their mean
    for k in range(dp):
        pm.zero_grad(set_to_none=True)
        loss += step(pm, pm.config.vocab_size, k) / dp
        own.append({n: p.grad.clone() for n, p in pm.named_parameters() if p.requires_grad and ".layers.0." in n})
    one = {n: sum(o[n] for o in own) / dp for n in own[0]}
    for r in range(world):
        t = torch.load(os.path.join(out, f"r{r}.pt"))
        print(f"rank {r}: loss {t['loss']:.9g} (one process, the mean over the data-parallel batches: {loss:.9g})")
        for n, g in one.items():
            diff = (t["grads"][n] - g).abs().max().item()
            print(f"  {n.split('layers.0.')[1]}: max |grad - one process's| {diff:.3g} (max |grad| {g.abs().max().item():.3g})"
                  + (f"; - its own batch's alone {(t['grads'][n] - own[r // a.tp][n]).abs().max().item():.3g}" if dp > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
