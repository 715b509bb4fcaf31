#!/usr/bin/env python3
"""Context parallelism (accelerate's ParallelismConfig(cp_size=C), cp_backend "torch") on the
CPU over gloo: torch 2.15's own context_parallel() (the head-tail sequence split, the SDPA
monkey patch, DTensor dispatch, _templated_ring_attention and its backward, the K/V rotaters,
the LSE merger) with ONE op stood in: torch's ring handler only takes the CUDA SDPA ops
(aten._scaled_dot_product_{flash,efficient,cudnn}_attention); on the CPU F.scaled_dot_product_attention
dispatches to aten._scaled_dot_product_flash_attention_for_cpu, for which torch registers no CP
sharding rule (NotImplementedError, FINDINGS R-CP-5). This probe registers the same rule and
handler for the CPU flash op and its backward, so torch's ring code calls the CPU flash kernel
per K/V block where a GPU calls the CUDA flash (or efficient / cuDNN) kernel.

The Trainer's CP code is run as written: Trainer._prepare_context_parallel_inputs (shift_labels,
position_ids, the buffers and seq dims) and accelerate's _attach_context_parallel_hooks (the
mask dropped, is_causal=True). FSDP2 over the cp dimension (accelerate shards the model over
dp_shard_cp) is not applied here: parameters are whole on each rank; what this measures is the
sequence split, the numerics and what autograd saves per rank (a saved_tensors_hooks count,
storage-deduplicated) and the ring's collectives.

Writes tests/data/hf-cp/<case>-r<rank>.json (schema gckpt.hf-cp/1):
  python3 tools/hf_probe/cp_ring_rerun.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "hf-cp")
SCHEMA = "gckpt.hf-cp/1"
sys.path.insert(0, os.path.join(ROOT, "python"))
from gckpt.tracker import _mode_class  # noqa: E402

RING_CALLS = []  # one entry per ring attention call (forward and backward) of the case running


def _ring_tracker():
    """LiveBytes keyed by the memory (data_ptr), not the storage object: the functional collectives'
    _wrap_tensor_autograd / wait_tensor hand back a second storage object over the same bytes, which
    LiveBytes (keyed by storage object) would count twice. Memory is dead when every storage object
    over it is."""
    from torch.multiprocessing.reductions import StorageWeakRef
    base = _mode_class()
    expired = torch.UntypedStorage._expired

    class RingBytes(base):
        def track(self, t, resident=False):
            if not isinstance(t, torch.Tensor):
                return
            try:
                st = t.untyped_storage()
                key = st.data_ptr()
            except RuntimeError:  # a wrapper subclass (AsyncCollectiveTensor): its inner tensor is tracked
                return
            if key in self.resident:
                return
            if key in self.live:
                self.live[key][0].append(StorageWeakRef(st))
                return
            if resident:
                self.resident.add(key)
            else:
                self.live[key] = ([StorageWeakRef(st)], st.nbytes())
            self.bytes += st.nbytes()

        def poll(self):
            dead = [k for k, (refs, _) in self.live.items() if all(expired(r.cdata) for r in refs)]
            for k in dead:
                self.bytes -= self.live.pop(k)[1]

    return RingBytes()
aten = torch.ops.aten

LLAMA = dict(vocab_size=211, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
             rms_norm_eps=1e-6, attention_dropout=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
# (name, batch, seq, world, every_n): seq % (2*world) == 0 -> head-tail split; 36 % 8 != 0 -> no balancing
# (name, batch, seq, world, every_n, dtype)
CASES = [("cp-llama-fp32-b1s32-w2", 1, 32, 2, 0, "float32"),
         ("cp-llama-fp32-b2s32-w2-n1", 2, 32, 2, 1, "float32"),
         ("cp-llama-bf16-b2s64-w2", 2, 64, 2, 0, "bfloat16"),
         ("cp-llama-fp32-b1s36-w4", 1, 36, 4, 0, "float32"),
         ("cp-llama-fp32-b1s32-w4", 1, 32, 4, 0, "float32"),
         ("cp-llama-fp32-b1s32-w2-alltoall", 1, 32, 2, 0, "float32")]  # cp_comm_strategy="alltoall"


def install_cpu_ring():
    """The stand-in: CP's sharding rule and ring handler for the CPU flash op, mirroring torch's
    for aten._scaled_dot_product_flash_attention (the same Shard(2) placements, the same
    _templated_ring_attention{,_backward} calls)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental._context_parallel import _attention as A
    from torch.distributed.tensor.experimental._context_parallel import _sharding_rules as SR
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    def fwd_rule(op, args_schema, kwargs_schema):
        return [[SR._cp_sharding(), SR._cp_sharding(),  # output, logsumexp
                 SR._cp_sharding(), SR._cp_sharding(), SR._cp_sharding()]]  # q, k, v

    def bwd_rule(op, args_schema, kwargs_schema):
        return [[SR._cp_sharding()] * 3 + [SR._cp_sharding()] * 6]  # dq dk dv | dout q k v out lse

    fwd_op = aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd_op = aten._scaled_dot_product_flash_attention_for_cpu_backward.default

    def ring_fwd(mesh, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
        if attn_mask is not None:
            raise NotImplementedError("CP takes no attention mask")
        return A._templated_ring_attention(mesh.get_group(), 2, fwd_op, query=query, key=key, value=value,
                                           is_causal=is_causal, dropout_p=dropout_p, scale=scale)

    def ring_bwd(mesh, grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None,
                 scale=None):
        return A._templated_ring_attention_backward(
            mesh.get_group(), 2, bwd_op, grad_out=grad_out, grad_out_name="grad_out", query=query, key=key,
            value=value, out=out, logsumexp=logsumexp, is_causal=is_causal, dropout_p=dropout_p, scale=scale)

    def tracked(fn, op_name):
        """The ring call under the storage tracker (python/gckpt/tracker.py's LiveBytes, by memory): the bytes its
        aten ops allocate above its inputs, at their peak and once it returns (its outputs). The
        kernels' own scratch (inside one aten op) is not seen."""
        def inner(*a, **k):
            mode = _ring_tracker()
            for t in list(a) + list(k.values()):
                mode.track(t, resident=True)
            base = mode.bytes
            mode.peak = base
            with mode:
                res = fn(*a, **k)
            mode.poll()
            RING_CALLS.append(dict(op=op_name, peak_above_inputs=mode.peak - base, outputs=mode.bytes - base))
            return res
        return inner

    calls = {fwd_op: tracked(ring_fwd, "forward"), bwd_op: tracked(ring_bwd, "backward")}

    def handler(op_call, args, kwargs):  # A._sdpa_handler with the CPU ops in its call map
        op_info = DTensor._op_dispatcher.unwrap_to_op_info(op_call, args, kwargs)
        DTensor._op_dispatcher.sharding_propagator.propagate(op_info)
        out_sh = op_info.output_sharding
        if out_sh is None or out_sh.needs_redistribute:
            raise AssertionError("CP stand-in: unexpected sharding")
        res = calls[op_call](op_info.compute_mesh, *op_info.local_args, **op_info.local_kwargs)
        return DTensor._op_dispatcher.wrap(res, out_sh.output_spec)

    orig_register = SR.register_cp_sharding_rules

    def register():
        orig_register()
        for op, rule, info in ((fwd_op, fwd_rule, RuntimeSchemaInfo(3)), (bwd_op, bwd_rule, None)):
            if op not in SR._cp_strategy_contexts:
                ctx = SR._single_dim_strategy_context(op, rule, info)
                SR._original_strategies[op] = ctx.__enter__()
                SR._cp_strategy_contexts[op] = ctx

    SR.register_cp_sharding_rules = register
    A.custom_ops[fwd_op] = handler
    A.custom_ops[bwd_op] = handler


class CollectiveLog:
    """The ring's collectives (functional all_gather_single / permute_tensor), bytes per call."""

    def __init__(self):
        import torch.distributed._functional_collectives as ft_c
        from torch.distributed.tensor.experimental._context_parallel import _attention as A
        self.calls = []
        self.phase = "forward"
        for name in ("all_gather_single", "permute_tensor"):
            orig = getattr(ft_c, name)

            def wrap(t, *a, _orig=orig, _name=name, **k):
                self.calls.append(dict(op=_name, phase=self.phase, dtype=str(t.dtype).replace("torch.", ""),
                                       in_bytes=t.numel() * t.element_size()))
                return _orig(t, *a, **k)
            setattr(A.ft_c, name, wrap)


def build(dtype="float32"):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(**LLAMA)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).to(getattr(torch, dtype))


def saved_one_process(dtype, b, s, every_n):
    """what one process saves per layer at seq s (the local length), plain SDPA (CPU flash)."""
    m = build(dtype)
    if every_n:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.train()
    per, pack, hooks = layer_saved(m)
    ids = batch(b, s)["input_ids"]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(input_ids=ids, position_ids=torch.arange(s).expand(b, -1))
    for h in hooks:
        h.remove()
    return {k: v for k, v in per.items() if not k.endswith(":shapes")}


def batch(b, s):
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, LLAMA["vocab_size"], (b, s), generator=g)
    return {"input_ids": ids, "labels": ids.clone()}


def layer_saved(model):
    """bytes autograd saves per region (decoder layer i / head-and-embedding 'rest'), storage-deduplicated,
    parameters left out."""
    # parameters (the weights a linear saves for its backward) are not activations: left out, as
    # probe.py's tracker leaves them out
    seen = {(p.untyped_storage().data_ptr(), p.untyped_storage().nbytes()) for p in model.parameters()}
    per, cur = {}, ["rest"]

    from torch.distributed.tensor import DTensor

    def pack(t0):
        # ring attention's saved q, k, v, out, lse are DTensors (Shard(2)): count the local tensor
        t = t0._local_tensor if isinstance(t0, DTensor) else t0
        st = t.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        if key not in seen:
            seen.add(key)
            per[cur[0]] = per.get(cur[0], 0) + st.nbytes()
            per.setdefault(cur[0] + ":shapes", []).append(
                [list(t.shape), str(t.dtype).replace("torch.", ""), isinstance(t0, DTensor)])
        return t0

    hooks = []
    for i, layer in enumerate(model.model.layers):
        hooks.append(layer.register_forward_pre_hook(lambda m, a, i=i: cur.__setitem__(0, f"layer{i}")))
        hooks.append(layer.register_forward_hook(lambda m, a, o: cur.__setitem__(0, "rest")))
    return per, pack, hooks


def trainer_cp_inputs(inputs, world):
    """Trainer._prepare_context_parallel_inputs (transformers 5.24) run on a stand-in self whose
    accelerator carries cp_enabled / cp_backend; returns its buffers and seq dims."""
    import contextlib
    import types
    from transformers import Trainer
    captured = {}
    pc = types.SimpleNamespace(cp_enabled=True, cp_backend="torch")
    acc = types.SimpleNamespace(parallelism_config=pc,
                                maybe_context_parallel=lambda **kw: (captured.update(kw), contextlib.nullcontext())[1])
    fake = types.SimpleNamespace(accelerator=acc)
    model = types.SimpleNamespace(config=types.SimpleNamespace(_attn_implementation="sdpa"))
    ctx, inputs = Trainer._prepare_context_parallel_inputs(fake, model, inputs)
    ctx()  # calls the partial: records buffers / buffer_seq_dims / no_restore_buffers
    return inputs, captured


def run_case(rank, world, case, out_dir):
    from accelerate.big_modeling import _attach_context_parallel_hooks
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method
    name, b, s, _, every_n, dtype = case
    rotate = "alltoall" if name.endswith("-alltoall") else "allgather"
    set_rotate_method(rotate)  # what accelerate's _prepare_cp does with cp_handler.cp_comm_strategy
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))
    model = build(dtype)
    ref = build(dtype)  # the one-process run of the whole sequence
    _attach_context_parallel_hooks(model)
    if every_n:
        for m in (model, ref):
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train(); ref.train()
    inputs = batch(b, s)
    full = {k: v.clone() for k, v in inputs.items()}
    inputs, cap = trainer_cp_inputs(inputs, world)
    positions_before = inputs["position_ids"].clone()
    log = CollectiveLog()
    RING_CALLS.clear()
    per, pack, hooks = layer_saved(model)
    with context_parallel(mesh, buffers=cap["buffers"], buffer_seq_dims=cap["buffer_seq_dims"],
                          no_restore_buffers=cap["no_restore_buffers"]):
        local_pos = inputs["position_ids"].clone()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(input_ids=inputs["input_ids"], position_ids=inputs["position_ids"])
        for h in hooks:
            h.remove()
        # the model's own loss with the CP-sharded shift_labels: a mean over this rank's tokens
        logits = out.logits.float()
        loss_sum = torch.nn.functional.cross_entropy(logits.flatten(0, 1), inputs["shift_labels"].flatten(),
                                                     ignore_index=-100, reduction="sum")
        log.phase = "backward"
        loss_sum.backward()
    n_valid = (torch.nn.functional.pad(full["labels"], (0, 1), value=-100)[:, 1:] != -100).sum()
    ref_out = ref(**full)
    (ref_out.loss * n_valid).backward()  # the sum over all tokens: equals the sum over ranks of loss_sum
    tot = loss_sum.detach().clone()
    dist.all_reduce(tot)
    max_rel = 0.0
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        g = p.grad.clone()
        dist.all_reduce(g)  # what FSDP2's reduce-scatter over dp_shard_cp sums
        max_rel = max(max_rel, ((g - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-30)).item())
    doc = dict(schema=SCHEMA, case=name, rank=rank, world=world, batch=b, seq=s, every_n_layers=every_n,
               cp_comm_strategy=rotate,
               dtype=dtype, model=dict(model_type="llama", **LLAMA),
               stood_in="aten._scaled_dot_product_flash_attention (CUDA) -> "
                        "aten._scaled_dot_product_flash_attention_for_cpu, per K/V block inside torch's ring",
               split=dict(local_seq=int(local_pos.shape[1]), positions=local_pos[0].tolist(),
                          head_tail=bool(s % (2 * world) == 0)),
               saved={k: v for k, v in per.items()},
               saved_one_process_local_seq=saved_one_process(dtype, b, int(local_pos.shape[1]), every_n),
               collectives=log.calls,
               ring_calls=list(RING_CALLS),
               numerics=dict(loss_sum_all_ranks=tot.item(), ref_loss_sum=(ref_out.loss * n_valid).item(),
                             grad_max_rel_diff=max_rel))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}-r{rank}.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return positions_before


def rank_main(rank, world, port, cases, out_dir, stand_in=True):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if stand_in:
        install_cpu_ring()
    try:
        for c in cases:
            run_case(rank, world, c, out_dir)
            dist.barrier()
    except Exception:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--case", action="append", help="case name (default: all)")
    ap.add_argument("--no-stand-in", action="store_true",
                    help="torch's context_parallel as shipped (on the CPU: NotImplementedError, FINDINGS R-CP-5)")
    ap.add_argument("--adhoc", nargs=3, type=int, metavar=("BATCH", "SEQ", "WORLD"),
                    help="one fp32 case outside the fixture set (e.g. a sequence CP cannot split evenly)")
    a = ap.parse_args(argv)
    cases = [c for c in CASES if not a.case or c[0] in a.case]
    if a.adhoc:
        b, s, w = a.adhoc
        cases = [(f"cp-adhoc-b{b}s{s}-w{w}", b, s, w, 0, "float32")]
    for world in sorted({c[3] for c in cases}):
        mp.spawn(rank_main, args=(world, free_port(), [c for c in cases if c[3] == world], a.out,
                                   not a.no_stand_in), nprocs=world)


if __name__ == "__main__":
    main()
