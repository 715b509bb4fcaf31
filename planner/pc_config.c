/* accelerate's ParallelismConfig as gckpt-plan takes it (gckpt/planner/pc_config.h). */
#include "gckpt/planner/pc_config.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/util/jsonget.h"

/* The fields of ParallelismConfig (accelerate 1.15 parallelism_config.py) a file may hold. */
static const char *const SIZES[] = {"dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size"};
enum { NSIZES = sizeof SIZES / sizeof SIZES[0] };

static bool known_backend(const cJSON *it, const char *want)
{
    return cJSON_IsNull(it) || (cJSON_IsString(it) && !strcmp(it->valuestring, want));
}

bool gckpt_pc_config_read(const char *path, gckpt_pc_sizes *out, gckpt_err *err)
{
    memset(out, 0, sizeof *out);
    cJSON *root = gckpt_json_read(path, 1u << 20, err);
    if (!root) return false;
    bool ok = cJSON_IsObject(root);
    if (!ok) gckpt_seterr(err, "%s: not a JSON object of ParallelismConfig's fields", path);
    uint64_t *dst[NSIZES] = {&out->dp_replicate, &out->dp_shard, &out->tp, &out->cp, &out->sp};
    for (const cJSON *it = ok ? root->child : NULL; it && ok; it = it->next) {
        int k = 0;
        while (k < NSIZES && strcmp(it->string, SIZES[k])) k++;
        if (k < NSIZES) ok = gckpt_json_u64_opt(root, path, SIZES[k], 1, 1u << 20, 0, dst[k], err);
        else if (!strcmp(it->string, "cp_backend") || !strcmp(it->string, "sp_backend")) {
            const char *want = it->string[0] == 'c' ? "torch" : "deepspeed";
            ok = known_backend(it, want);
            if (!ok) gckpt_seterr(err, "%s: field '%s' must be \"%s\" (accelerate ParallelismConfig)", path, it->string, want);
        } else {
            gckpt_seterr(err, "%s: field '%s' is not a ParallelismConfig size (dp_replicate_size, dp_shard_size, "
                              "tp_size, cp_size, sp_size, cp_backend, sp_backend)", path, it->string);
            ok = false;
        }
    }
    cJSON_Delete(root);
    return ok;
}

static uint64_t or1(uint64_t v) { return v ? v : 1; }

bool gckpt_pc_check(const gckpt_pc_sizes *pc, uint32_t world, uint32_t *dp_replicate, uint32_t *tp, gckpt_err *err)
{
    *tp = 0;
    static const char *const later[] = {"tensor (tp_size)", "context (cp_size)", "sequence (sp_size)"};
    const uint64_t other[] = {pc->tp, pc->cp, pc->sp};
    uint64_t r = or1(pc->dp_replicate), s = or1(pc->dp_shard), t = or1(pc->tp), c = or1(pc->cp), q = or1(pc->sp);
    if (t * c * q != 1) { /* accelerate's checks first (FINDINGS R-TP-1, measured), then what is not planned */
        if (r * s * t * c * q != world) {
            gckpt_seterr(err, "ParallelismConfig: dp_replicate_size %llu x dp_shard_size %llu x tp_size %llu x cp_size "
                              "%llu x sp_size %llu = %llu, not the %u processes of --gpus x --nodes (accelerate "
                              "_validate_accelerator: total_size must equal num_processes)", (unsigned long long)r,
                         (unsigned long long)s, (unsigned long long)t, (unsigned long long)c, (unsigned long long)q,
                         (unsigned long long)(r * s * t * c * q), world);
            return false;
        }
        if ((t > 1 || c > 1) && r > 1 && s == 1) {
            gckpt_seterr(err, "ParallelismConfig: tp_size / cp_size > 1 with dp_replicate_size %llu and dp_shard_size 1 "
                              "(accelerate ParallelismConfig: tensor / context parallelism cannot be used with pure "
                              "data parallelism)", (unsigned long long)r);
            return false;
        }
    }
    if (t > 1 && r * s * c * q == 1) { /* TP alone: transformers' tp_plan over every process (core/tp.h) */
        *tp = (uint32_t)t;
        *dp_replicate = 0;
        return true;
    }
    if (t > 1 && r == 1 && c * q == 1) { /* TP x FSDP: transformers' own fully_shard over dp_shard (R-TP-8) */
        *tp = (uint32_t)t;
        *dp_replicate = 1;
        return true;
    }
    for (int k = 0; k < 3; k++)
        if (or1(other[k]) != 1) {
            gckpt_seterr(err, "ParallelismConfig: %s parallelism of %llu is not yet planned; only dp_replicate x "
                              "dp_shard (HSDP under FSDP2)%s", later[k], (unsigned long long)other[k],
                         k == 0 ? " (TP with dp_replicate_size > 1 in accelerate's ParallelismConfig: the Trainer "
                                  "overwrites its dp_shard_size with DistributedConfig's dp_size; TP alone and TP x "
                                  "dp_shard are planned, and TP x DDP / HSDP x TP by --tp with --dp-replicate, FINDINGS "
                                  "R-TP-11)" : "");
            return false;
        }
    if (r * s != world) {
        gckpt_seterr(err, "ParallelismConfig: dp_replicate_size %llu x dp_shard_size %llu = %llu, not the %u "
                          "processes of --gpus x --nodes (accelerate _validate_accelerator: total_size must equal "
                          "num_processes)", (unsigned long long)r, (unsigned long long)s,
                     (unsigned long long)(r * s), world);
        return false;
    }
    if (s < 2) {
        gckpt_seterr(err, "ParallelismConfig: dp_shard_size 1 leaves FSDP no dimension to shard across (accelerate "
                          "_validate_accelerator; pure data parallelism is --parallel ddp)");
        return false;
    }
    *dp_replicate = (uint32_t)r;
    return true;
}

bool gckpt_pc_cp(const gckpt_pc_sizes *pc, uint32_t world, uint32_t *cp, uint32_t *dp_replicate, gckpt_err *err)
{
    *cp = *dp_replicate = 0;
    uint64_t r = or1(pc->dp_replicate), s = or1(pc->dp_shard), t = or1(pc->tp), c = or1(pc->cp), q = or1(pc->sp);
    if (c < 2) return true;
    /* accelerate's own checks first (FINDINGS R-CP-1), then what is not measured */
    if (r * s * t * c * q != world) {
        gckpt_seterr(err, "ParallelismConfig: dp_replicate_size %llu x dp_shard_size %llu x tp_size %llu x cp_size "
                          "%llu x sp_size %llu = %llu, not the %u processes of --gpus x --nodes (accelerate "
                          "_validate_accelerator: total_size must equal num_processes)", (unsigned long long)r,
                     (unsigned long long)s, (unsigned long long)t, (unsigned long long)c, (unsigned long long)q,
                     (unsigned long long)(r * s * t * c * q), world);
        return false;
    }
    if (q > 1) {
        gckpt_seterr(err, "ParallelismConfig: cp_size %llu with sp_size %llu (accelerate: context parallelism and "
                          "sequence parallelism are mutually exclusive)", (unsigned long long)c, (unsigned long long)q);
        return false;
    }
    if (r > 1 && s == 1) {
        gckpt_seterr(err, "ParallelismConfig: cp_size %llu with dp_replicate_size %llu and dp_shard_size 1 "
                          "(accelerate ParallelismConfig: tensor / context parallelism cannot be used with pure data "
                          "parallelism)", (unsigned long long)c, (unsigned long long)r);
        return false;
    }
    if (t > 1) { /* measured by tools/hf_probe/cp_tp_check.py (tests/data/hf-cp-tp) */
        /* short: the reader prefixes a --parallelism-config file's path within gckpt_err's 512 bytes */
        gckpt_seterr(err, "ParallelismConfig: cp_size %llu with tp_size %llu: transformers' TP loader builds a (pp, "
                          "dp_replicate, fsdp, tp) mesh with no cp dimension that must span the world "
                          "(distributed/utils.py:315), and the Trainer sets tp_size and dp_shard_size from it "
                          "(trainer.py:789), so the sizes exceed the processes and accelerate refuses "
                          "(parallelism_config.py:373) (FINDINGS R-CP-19)",
                     (unsigned long long)c, (unsigned long long)t);
        return false;
    }
    *cp = (uint32_t)c;
    *dp_replicate = r > 1 ? (uint32_t)r : 0; /* FSDP2 over accelerate's (dp_replicate, dp_shard_cp) mesh */
    return true;
}
