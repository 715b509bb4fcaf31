#!/usr/bin/env python3
"""Randomized soak of gckpt-run on several ranks (issue 21; not part of ctest).

Each round draws a small llama-like model (layers, heads, kv heads, head_dim, hidden,
intermediate and vocabulary drawn as tests/executor's fixtures are: small, uneven shards
common), a parallel mode (ddp, zero1, zero2, zero3, fsdp), a world of 2 to 4 ranks, a
precision (fp32 or amp-bf16), micro-batch, grad_accum and every_n values; plans it with
gckpt-plan and runs it with `mpirun -np N gckpt-run --backend host`, and does one of:
nothing, kill -9 of a random rank, SIGTERM to a random rank, SIGTERM to mpirun, after a
random delay. Checked every round:
  - mpirun ends within the collective bound plus a margin (GCKPT_COLLECTIVE_TIMEOUT);
  - no temporary (*.gckpt-tmp-*) is left beside the report;
  - the report is whole: every line one JSON record, the header first; it ends with a
    summary ("ended": true) unless rank 0 itself was killed with -9; an interrupted entry
    says by which signal; there is none only when rank 0 was killed with -9 or had not yet
    installed its SIGTERM handler when the signal was sent (read from /proc/PID/status,
    SigCgt; from then on, MPI_Init included, rank 0's report has at least the header and the
    summary);
  - a round left alone exits 0 with every entry passed.
Usage: tests/ci/mpi_soak.py [--minutes M] [--build DIR] [--seed S] [--timeout S] [--sigkill-timeout S]
Prints one line per round and the counts at the end; exit 1 when a check failed."""
import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MODES = ["ddp", "zero1", "zero2", "zero3", "fsdp"]


def draw_model(rng):
    heads = rng.choice([2, 4, 6])
    kv = rng.choice([k for k in (1, 2, heads) if heads % k == 0])
    head_dim = rng.choice([8, 10, 12, 16, 20])
    hidden = rng.choice([heads * head_dim, 40, 48, 64, 120])
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "num_hidden_layers": rng.randint(1, 4), "hidden_size": hidden,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
        "intermediate_size": rng.randint(hidden, 3 * hidden),
        "vocab_size": rng.randint(97, 1100), "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "attention_bias": False, "tie_word_embeddings": rng.random() < 0.25,
        "torch_dtype": "bfloat16",
    }


def handles_sigterm(pid):
    """Whether the process catches SIGTERM now (its handler is installed)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False


def check_report(path, killed_rank0):
    """None when the report is whole, else why not."""
    if not os.path.exists(path):
        return None if killed_rank0 else "no report"
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        return "an empty report"
    if not data.endswith(b"\n"):
        return "the last line is cut"
    recs = []
    for i, line in enumerate(data.decode().splitlines()):
        try:
            recs.append(json.loads(line))
        except ValueError:
            return "line %d is not JSON" % (i + 1)
    if recs[0].get("record") != "header":
        return "no header first"
    if recs[-1].get("record") != "summary":
        return None if killed_rank0 else "no summary"
    if not recs[-1].get("ended"):
        return "summary not ended"
    if sum(r.get("record") == "summary" for r in recs) != 1:
        return "two summaries"
    for r in recs[1:-1]:
        if r.get("record") != "entry":
            return "a record that is not an entry"
        if r.get("status") == "interrupted" and "stopped by" not in (r.get("message") or ""):
            return "an interrupted entry that does not say by what"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--build", default="build")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--timeout", type=float, default=20, help="GCKPT_COLLECTIVE_TIMEOUT for the ranks")
    ap.add_argument("--sigkill-timeout", type=float, default=None,
                    help="mpirun's odls_base_sigkill_timeout: how long it waits between the SIGTERM and the SIGKILL it "
                         "sends the other ranks when one rank dies (Open MPI's default: 1 s)")
    a = ap.parse_args()
    plan_exe = os.path.abspath(os.path.join(a.build, "gckpt-plan"))
    run_exe = os.path.abspath(os.path.join(a.build, "gckpt-run"))
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if not mpirun:
        print("mpi_soak: no mpirun", file=sys.stderr)
        return 77
    rng = random.Random(a.seed)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               GCKPT_COLLECTIVE_TIMEOUT=str(a.timeout))
    work = tempfile.mkdtemp(prefix="gckpt-soak-")
    counts = {}
    bad = []
    end = time.time() + 60 * a.minutes
    n = 0
    print("mpi_soak: seed %d, %s%s" % (a.seed, work, "" if a.sigkill_timeout is None else
                                        ", odls_base_sigkill_timeout %g s" % a.sigkill_timeout), flush=True)
    while time.time() < end:
        n += 1
        d = os.path.join(work, "r%d" % n)
        os.mkdir(d)
        model = draw_model(rng)
        mode, world = rng.choice(MODES), rng.randint(2, 4)
        prec = rng.choice(["fp32", "amp-bf16"])
        with open(os.path.join(d, "model.json"), "w") as f:
            json.dump(model, f)
        every = ",".join(sorted(set(rng.choice(["off", "1", "2"]) for _ in range(2))))
        cmd = [plan_exe, "--model", "model.json", "--seq", str(rng.choice([16, 32, 64])), "--micro-batch",
               str(rng.randint(1, 2)), "--grad-accum", str(rng.randint(1, 2)), "--every-n", every, "--offload",
               rng.choice(["off", "both"]), "--gpus", str(world), "--parallel", mode, "--precision", prec,
               "-q", "-o", "plan.json"]
        p = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            counts["not planned"] = counts.get("not planned", 0) + 1
            shutil.rmtree(d)
            continue
        action = rng.choice(["none", "none", "kill9-rank", "term-rank", "term-mpirun"])
        delay = rng.uniform(0.05, 2.0)
        t0 = time.time()
        mca = [] if a.sigkill_timeout is None else ["--mca", "odls_base_sigkill_timeout", "%g" % a.sigkill_timeout]
        mp = subprocess.Popen([mpirun, "--oversubscribe", *mca, "-np", str(world), run_exe, "--plan", "plan.json", "--all",
                               "--backend", "host", "--steps", "2", "--warmup", "1", "-q", "-o", "report.jsonl"],
                              cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "err"), "w"))
        victim = None
        armed0 = True  # a run left alone, or one that ended before the signal, has its report
        if action != "none":
            try:
                mp.wait(timeout=delay)
                action += " (ended first)"
            except subprocess.TimeoutExpired:
                ranks = subprocess.run(["pgrep", "-P", str(mp.pid), "-x", "gckpt-run"], capture_output=True,
                                       text=True).stdout.split()
                # the ranks in rank order: OMPI_COMM_WORLD_RANK from each one's environment
                order = {}
                armed0 = False
                for pid in ranks:
                    try:
                        with open("/proc/%s/environ" % pid, "rb") as f:
                            for kv in f.read().split(b"\0"):
                                if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                                    order[int(kv.split(b"=")[1])] = int(pid)
                    except OSError:
                        pass
                armed0 = 0 in order and handles_sigterm(order[0])
                if action == "term-mpirun":
                    mp.send_signal(signal.SIGTERM)
                elif order:
                    victim = rng.choice(sorted(order))
                    try:
                        os.kill(order[victim], signal.SIGKILL if action == "kill9-rank" else signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                    action += " %d" % victim
        bound = a.timeout * 3 + 60 + (300 if action == "none" else 0)
        try:
            rc = mp.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            # is a rank still alive, or has mpirun itself stalled after every rank ended (its
            # PMIx server after a rank killed while the ranks were starting)?
            alive = []
            for pid in subprocess.run(["pgrep", "-P", str(mp.pid)], capture_output=True, text=True).stdout.split():
                try:
                    with open("/proc/%s/stat" % pid) as f:
                        if f.read().split(")")[-1].split()[0] != "Z":
                            alive.append(pid)
                except OSError:
                    pass
            mp.kill()
            rc = mp.wait()
            what = "HANG" if alive else "mpirun stalled after every rank ended"
            bad.append((n, "%s: mpirun did not end within %.0f s" % (what, bound), d))
            counts[what] = counts.get(what, 0) + 1
        secs = time.time() - t0
        # rank 0 prints its estimate once its ranks have started (after MPI_Init): a signal
        # before is counted apart; its report is required all the same once rank 0 had its
        # SIGTERM handler (none only when the signal came before: the process just started)
        with open(os.path.join(d, "err"), errors="replace") as f:
            started = "gckpt-run: host backend:" in f.read()
        why = check_report(os.path.join(d, "report.jsonl"), action.startswith("kill9-rank 0") or not armed0)
        if not started and action != "none":
            action += " (before the start)" if armed0 else " (before rank 0's handler)"
        tmps = glob.glob(os.path.join(d, "*.gckpt-tmp-*"))
        if tmps:
            why = (why + "; " if why else "") + "temporary left: " + os.path.basename(tmps[0])
        if action == "none" and rc != 0:
            why = (why + "; " if why else "") + "exit %d without a signal" % rc
        key = action.split(" ")[0] + (" (ended first)" if "ended first" in action else "") + \
            (" (before the start)" if "before the start" in action else "") + \
            (" (before rank 0's handler)" if "before rank 0's handler" in action else "")
        counts[key] = counts.get(key, 0) + 1
        status = "ok" if not why else "FAIL: " + why
        print("%4d %-5s w%d %-8s L%d h%d v%d %-22s rc %4d %5.1f s  %s" %
              (n, mode, world, prec, model["num_hidden_layers"], model["hidden_size"], model["vocab_size"], action, rc,
               secs, status), flush=True)
        if why:
            bad.append((n, why, d))
        else:
            shutil.rmtree(d)
    print("mpi_soak: %d rounds, %s; %d failed" % (n, ", ".join("%s %d" % kv for kv in sorted(counts.items())), len(bad)))
    for b in bad:
        print("  round %d: %s (%s)" % b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
