/* gckpt-plan as a user runs it: every bad input gives exit 2, one line on stderr that
 * names the file or option, and no output file (an existing one is left untouched). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_harness.h"

static int run(char *const args[], char *err, size_t n) { return cli_run(GCKPT_PLAN_EXE, args, NULL, err, n); }

#ifndef GCKPT_PLAN_EXE
#error GCKPT_PLAN_EXE must name the gckpt-plan binary
#endif






typedef struct {
    const char *what;
    char *const *args;
    const char *needle; /* must appear in the error line */
} bad_case;

static void bad_inputs(void **state)
{
    (void)state;
    cli_write("malformed.json", "{\"model_type\": \"llama\", \"hidden_size\": 64,");
    cli_write("truncated.json", "{\"model_type\": \"llama\", \"num_hidden_la");
    cli_write("empty.json", "");
    cli_write("array.json", "[1, 2, 3]");
    cli_write("nan.json", "{\"model_type\":\"llama\",\"num_hidden_layers\":NaN}");
    cli_write("missing.json", "{\"model_type\":\"llama\",\"hidden_size\":64}");
    cli_write("wrongtype.json", "{\"model_type\":\"llama\",\"num_hidden_layers\":\"32\",\"hidden_size\":64,\"num_attention_heads\":4,\"intermediate_size\":8,\"vocab_size\":8}");
    cli_write("zero.json", "{\"model_type\":\"llama\",\"num_hidden_layers\":0,\"hidden_size\":64,\"num_attention_heads\":4,\"intermediate_size\":8,\"vocab_size\":8}");
    cli_write("negative.json", "{\"model_type\":\"llama\",\"num_hidden_layers\":2,\"hidden_size\":-64,\"num_attention_heads\":4,\"intermediate_size\":8,\"vocab_size\":8}");
    cli_write("fraction.json", "{\"model_type\":\"llama\",\"num_hidden_layers\":2.5,\"hidden_size\":64,\"num_attention_heads\":4,\"intermediate_size\":8,\"vocab_size\":8}");
    cli_write("huge.json", "{\"model_type\":\"llama\",\"num_hidden_layers\":2,\"hidden_size\":1e300,\"num_attention_heads\":4,\"intermediate_size\":8,\"vocab_size\":8}");
    cli_write("indivisible.json", "{\"model_type\":\"llama\",\"num_hidden_layers\":2,\"hidden_size\":65,\"num_attention_heads\":4,\"intermediate_size\":8,\"vocab_size\":8}");
    cli_write("kvheads.json", "{\"model_type\":\"llama\",\"num_hidden_layers\":2,\"hidden_size\":64,\"num_attention_heads\":4,\"num_key_value_heads\":3,\"intermediate_size\":8,\"vocab_size\":8}");
    cli_write("unknown.json", "{\"model_type\":\"t5\"}");
    cli_write("qwen2moe.json", "{\"model_type\":\"qwen2_moe\",\"num_hidden_layers\":2}");
    /* a vision-language config without its vision section (transformers would build the class's default tower) */
    cli_write("novision.json", "{\"model_type\":\"llava\",\"text_config\":{\"model_type\":\"llama\"}}");
    cli_write("chunked.json", "{\"model_type\":\"gemma3_text\",\"num_hidden_layers\":2,\"hidden_size\":64,"
              "\"num_attention_heads\":4,\"intermediate_size\":8,\"vocab_size\":8,"
              "\"layer_types\":[\"chunked_attention\",\"full_attention\"]}");
    cli_write("bigvocab.json", "{\"model_type\":\"llama\",\"num_hidden_layers\":2,\"hidden_size\":1048576,\"num_attention_heads\":4096,\"intermediate_size\":4194304,\"vocab_size\":16777216}");
    cli_write("gpu-missing.json", "{\"schema\":\"gckpt.device/1\",\"name\":\"x\"}");
    /* accelerate's ParallelismConfig as a file (--parallelism-config) */
    cli_write("pc-tp.json", "{\"dp_shard_size\": 2, \"tp_size\": 2}");
    cli_write("pc-hsdp-tp.json", "{\"dp_replicate_size\": 2, \"dp_shard_size\": 2, \"tp_size\": 2}");
    cli_write("pc-ddp-tp.json", "{\"dp_replicate_size\": 2, \"tp_size\": 2}");
    cli_write("pc-tp-cp.json", "{\"tp_size\": 2, \"cp_size\": 2}");
    cli_write("pc-odd.json", "{\"dp_replicate_size\": 3, \"dp_shard_size\": 2}");
    cli_write("pc-key.json", "{\"dp_replicate_size\": 2, \"dp_shard\": 2}");
    cli_write("pc-zero.json", "{\"dp_replicate_size\": 0, \"dp_shard_size\": 4}");
    cli_write("pc-ok.json", "{\"dp_replicate_size\": 2, \"dp_shard_size\": 2, \"tp_size\": 1, \"cp_size\": null}");
    cli_write("gpu-schema.json", "{\"schema\":\"gckpt.device/9\"}");
    cli_write("gpu-neg.json", "{\"schema\":\"gckpt.device/1\",\"name\":\"x\",\"memory_bytes\":-5}");
    cli_write("ds-z3.json", "{\"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": \"auto\"}}");
    cli_write("ds-nozero.json", "{\"bf16\": {\"enabled\": \"auto\"}}");
    cli_write("ds-stage4.json", "{\"zero_optimization\": {\"stage\": 4}}");
    cli_write("ds-frac.json", "{\"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 2.5}}");
    cli_write("ds-offload.json", "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\"}}}");
    /* CPU offload (FINDINGS R-OFFLOAD-5): what DeepSpeed itself refuses or ignores, and what is not modelled */
    cli_write("ds-off-z2.json", "{\"optimizer\": {\"type\": \"AdamW\"}, \"zero_optimization\": {\"stage\": 2, "
              "\"offload_optimizer\": {\"device\": \"cpu\"}}}");
    cli_write("ds-off-z1.json", "{\"optimizer\": {\"type\": \"AdamW\"}, \"zero_optimization\": {\"stage\": 1, "
              "\"offload_optimizer\": {\"device\": \"cpu\"}}}");
    cli_write("ds-off-z3p.json", "{\"optimizer\": {\"type\": \"AdamW\"}, \"zero_optimization\": {\"stage\": 3, "
              "\"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}}}");
    cli_write("ds-hpz.json", "{\"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": 8}}");
    cli_write("ds-qgrad.json", "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_gradients\": true}}");
    cli_write("ds-noncontig.json", "{\"zero_optimization\": {\"stage\": 2, \"contiguous_gradients\": false}}");
    cli_write("ds-nomelinear.json", "{\"zero_optimization\": {\"stage\": 3, \"memory_efficient_linear\": false}}");
    cli_write("ds-accum32.json", "{\"data_types\": {\"grad_accum_dtype\": \"fp32\"}, \"zero_optimization\": {\"stage\": 1}}");
    cli_write("ds-ratio.json", "{\"optimizer\": {\"type\": \"AdamW\"}, \"zero_optimization\": {\"stage\": 3, "
              "\"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.3}}}");
    cli_write("ds-overlap-bad.json", "{\"zero_optimization\": {\"stage\": 2, \"overlap_comm\": \"yes\"}}");
    cli_write("ds-off-param-z1.json", "{\"zero_optimization\": {\"stage\": 1, \"offload_param\": {\"device\": \"cpu\"}}}");
    cli_write("ds-off-noopt.json", "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}}}");
    cli_write("ds-off-unpinned.json", "{\"optimizer\": {\"type\": \"AdamW\"}, \"zero_optimization\": {\"stage\": 3, "
              "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false}}}");
    cli_write("ds-off-notobj.json", "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": \"cpu\"}}");
    cli_write("ds-fp16.json", "{\"fp16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 2}}");
    cli_write("ds-nobf16.json", "{\"bf16\": {\"enabled\": false}, \"zero_optimization\": {\"stage\": 1}}");
    cli_write("gpu-nolink.json", "{\"schema\":\"gckpt.device/1\",\"name\":\"x\",\"memory_bytes\":85520809984,"
              "\"peak_tflops\":{\"fp32\":67,\"tf32\":494.7,\"bf16\":989.4,\"fp16\":989.4},\"matmul_efficiency\":0.8,"
              "\"hbm_bytes_per_s\":3.35e12,\"hbm_efficiency\":0.87,\"h2d_bytes_per_s\":5e10,\"d2h_bytes_per_s\":5e10,"
              "\"context_bytes\":0,\"workspace_bytes\":0,\"alloc_round_bytes\":512,\"segment_round_bytes\":2097152}");
    /* one node's link, no network between nodes */
    cli_write("gpu-nonet.json", "{\"schema\":\"gckpt.device/1\",\"name\":\"x\",\"memory_bytes\":85520809984,"
              "\"peak_tflops\":{\"fp32\":67,\"tf32\":494.7,\"bf16\":989.4,\"fp16\":989.4},\"matmul_efficiency\":0.8,"
              "\"hbm_bytes_per_s\":3.35e12,\"hbm_efficiency\":0.87,\"h2d_bytes_per_s\":5e10,\"d2h_bytes_per_s\":5e10,"
              "\"context_bytes\":0,\"workspace_bytes\":0,\"alloc_round_bytes\":512,\"segment_round_bytes\":2097152,"
              "\"intra_node_bus_bytes_per_s\":4.5e11}");
    char dirpath[300];
    snprintf(dirpath, sizeof dirpath, "%s/adir.json", cli_dir);
    mkdir(dirpath, 0755);
    bad_case cases[] = {
        {"malformed model", A("--model", "./malformed.json", "-o", "out.json"), "malformed JSON"},
        {"truncated model", A("--model", "./truncated.json", "-o", "out.json"), "malformed JSON"},
        {"empty model", A("--model", "./empty.json", "-o", "out.json"), "empty file"},
        {"array model", A("--model", "./array.json", "-o", "out.json"), "JSON object"},
        {"NaN", A("--model", "./nan.json", "-o", "out.json"), "malformed JSON"},
        {"missing field", A("--model", "./missing.json", "-o", "out.json"), "'num_hidden_layers'"},
        {"wrong type", A("--model", "./wrongtype.json", "-o", "out.json"), "'num_hidden_layers' must be an integer"},
        {"zero", A("--model", "./zero.json", "-o", "out.json"), "'num_hidden_layers'"},
        {"negative", A("--model", "./negative.json", "-o", "out.json"), "'hidden_size'"},
        {"fraction", A("--model", "./fraction.json", "-o", "out.json"), "must be an integer"},
        {"huge", A("--model", "./huge.json", "-o", "out.json"), "'hidden_size'"},
        {"indivisible", A("--model", "./indivisible.json", "-o", "out.json"), "not divisible"},
        {"kv heads", A("--model", "./kvheads.json", "-o", "out.json"), "does not divide"},
        {"unknown model_type", A("--model", "./unknown.json", "-o", "out.json"), "supported: llama"},
        {"mixture of experts", A("--model", "./qwen2moe.json", "-o", "out.json"), "mixture-of-experts"},
        /* Qwen2.5-VL is planned, its tokens per image from the image's size: --image-size needed */
        {"Qwen2.5-VL-7B without an image size", A("--model", GCKPT_TEST_DATA "/configs/qwen2.5-vl-7b.json", "-o",
                                                  "out.json"),
         "--image-size: model_type \"qwen2_5_vl\" (qwen2.5-vl-7b) needs the images' size HxW"},
        {"Qwen3-VL-4B without an image size", A("--model", GCKPT_TEST_DATA "/configs/qwen3-vl-4b.json", "-o",
                                                "out.json"),
         "--image-size: model_type \"qwen3_vl\" (qwen3-vl-4b) needs the images' size HxW"},
        {"VLM eager", A("--model", GCKPT_TEST_DATA "/configs/qwen2.5-vl-7b.json", "--image-size", "448x448",
                        "--attention", "eager", "-o", "out.json"),
         "qwen2_5_vl: attention other than sdpa on a VLM is not planned"},
        {"Qwen2.5-VL-7B extreme aspect", A("--model", GCKPT_TEST_DATA "/configs/qwen2.5-vl-7b.json", "--image-size",
                                           "10x2100", "-o", "out.json"),
         "--image-size"},
        /* vision-language models (issue 26): measured (tests/data/hf-vlm), not planned yet */
        /* Gemma 3 is planned: what its step does not simulate, one line each */
        {"Gemma 3 QLoRA fp4", A("--model", GCKPT_TEST_DATA "/configs/gemma-3-4b.json", "--method", "qlora", "--quant",
                                "fp4", "-o", "out.json"),
         "gemma3: QLoRA on a VLM is measured with nf4 under amp-bf16 only (FINDINGS R-VLM-92)"},
        {"Qwen2.5-VL LoRA", A("--model", GCKPT_TEST_DATA "/configs/qwen2.5-vl-7b.json", "--image-size", "448x448",
                              "--method", "lora", "-o", "out.json"),
         "qwen2_5_vl: LoRA on it is not measured (llava's and gemma3's are: FINDINGS R-VLM-43, R-VLM-93)"},
        {"Gemma 3 several GPUs", A("--model", GCKPT_TEST_DATA "/configs/gemma-3-4b.json", "--gpus", "2", "--parallel",
                                   "ddp", "-o", "out.json"), "gemma3: a VLM is planned on one GPU only"},
        {"Gemma 3 eager", A("--model", GCKPT_TEST_DATA "/configs/gemma-3-4b.json", "--attention", "eager", "-o",
                            "out.json"), "gemma3: its token_type_ids masks are measured under sdpa only"},
        {"Gemma 3 fused loss", A("--model", GCKPT_TEST_DATA "/configs/gemma-3-4b.json", "--loss", "liger", "-o",
                                 "out.json"), "gemma3: a fused loss on a VLM is not planned"},
        {"Llama-3.2-11B-Vision LoRA", A("--model", GCKPT_TEST_DATA "/configs/llama-3.2-11b-vision.json", "--method",
                                        "lora", "-o", "out.json"),
         "mllama: LoRA on it is not measured (llava's and gemma3's are: FINDINGS R-VLM-43, R-VLM-93)"},
        /* LLaVA is planned (planner/plan_vlm.c): its image options' bad values and what its step does not simulate */
        {"images zero", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--images", "0", "-o", "out.json"),
         "--images: '0' is not an integer in [1, 4096]"},
        {"image size syntax", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--image-size", "336", "-o",
                                "out.json"), "--image-size: '336' is not an image size HxW"},
        {"image size zero", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--image-size", "0x336", "-o",
                              "out.json"), "--image-size: '0x336' is not an image size HxW"},
        {"vision tower", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--vision-tower", "half", "-o",
                           "out.json"), "--vision-tower: unknown 'half' (trained, frozen)"},
        {"checkpoint towers", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--checkpoint-towers", "both",
                                "-o", "out.json"), "--checkpoint-towers: unknown 'both' (all, text, vision)"},
        {"checkpoint towers on a text model", A("--model", "gpt2", "--checkpoint-towers", "text", "-o", "out.json"),
         "--checkpoint-towers: model_type \"gpt2\" (gpt2) is no vision-language model"},
        {"checkpoint towers all on a text model", A("--model", "gpt2", "--checkpoint-towers", "all", "-o", "out.json"),
         "--checkpoint-towers: model_type \"gpt2\" (gpt2) is no vision-language model"},
        {"checkpoint towers with LoRA", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--seq", "1024",
                                          "--method", "lora", "--checkpoint-towers", "text", "-o", "out.json"),
         "--checkpoint-towers text with --method lora: per-layer checkpointing under peft is not measured (all is)"},
        {"checkpoint towers every-n", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--checkpoint-towers",
                                        "text", "--every-n", "33", "-o", "out.json"),
         "--every-n: 33 exceeds the model's 32 layers"},
        {"images on a text model", A("--model", "gpt2", "--images", "2", "-o", "out.json"),
         "--images: model_type \"gpt2\" (gpt2) is no vision-language model"},
        {"vision tower on a text model", A("--model", "gpt2", "--vision-tower", "frozen", "-o", "out.json"),
         "--vision-tower: model_type \"gpt2\""},
        {"image tokens fill seq", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--seq", "1024", "--images",
                                    "2", "-o", "out.json"),
         "--seq 1024: a sample's 2 image(s) take 1152 tokens of it (576 each), leaving no text tokens"},
        /* QLoRA on LLaVA is planned at what the probe measured: nf4 under amp-bf16 */
        {"LLaVA QLoRA int8", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--seq", "1024", "--method",
                               "qlora", "--quant", "int8", "-o", "out.json"),
         "llava: QLoRA on a VLM is measured with nf4 under amp-bf16 only (FINDINGS R-VLM-92): plan --quant nf4 "
         "--precision amp-bf16"},
        {"LLaVA QLoRA fp32", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--seq", "1024", "--method",
                               "qlora", "--precision", "fp32", "-o", "out.json"),
         "llava: QLoRA on a VLM is measured with nf4 under amp-bf16 only"},
        {"LLaVA LoRA modules_to_save", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--seq", "1024",
                                         "--method", "lora", "--modules-to-save", "lm_head", "-o", "out.json"),
         "llava: modules_to_save on a VLM is not planned"},
        {"LLaVA LoRA, tower trained", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--seq", "1024",
                                        "--method", "lora", "--vision-tower", "trained", "-o", "out.json"),
         "--vision-tower trained with --method lora: get_peft_model freezes the vision tower (adapters on the text "
         "model only are planned)"},
        {"LLaVA every-n", A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--every-n", "57", "-o", "out.json"),
         "--every-n: 57 exceeds the model's 56 layers"},
        {"VLM without vision_config", A("--model", "./novision.json", "-o", "out.json"),
         "novision.json: field 'vision_config' is missing: model_type \"llava\" (LLaVA) is a vision-language model"},
        /* peft 0.21.2 maps all-linear and the MLP names to the routed experts' fused
         * parameters and the router there (FINDINGS R-PEFT-29) */
        {"deepseek_v3 lora all-linear", A("--model", GCKPT_TEST_DATA "/configs/deepseek-v3.json", "--method", "lora", "-o",
                                          "out.json"),
         "--lora-targets all-linear on model_type \"deepseek_v3\": peft's all-linear also wraps the router and the "
         "experts' fused gate_up_proj / down_proj parameters (ParamWrapper, run by grouped_mm), which is not modelled; "
         "attention adapters are: --lora-targets q_proj,o_proj,q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj"},
        {"deepseek_v3 lora on an MLP name", A("--model", GCKPT_TEST_DATA "/configs/deepseek-v3.json", "--method", "qlora",
                                              "--lora-targets", "kv_b_proj,gate_proj", "-o", "out.json"),
         "--lora-targets: on model_type \"deepseek_v3\" only the attention projections "
         "q_proj,o_proj,q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj are modelled"},
        /* q_lora_rank 1536: no q_proj (peft refuses a list none of whose names a module has) */
        {"deepseek_v3 q_proj without one", A("--model", GCKPT_TEST_DATA "/configs/deepseek-v3.json", "--method", "lora",
                                             "--lora-targets", "q_proj", "-o", "out.json"),
         "--lora-targets: no linear of deepseek-v3 matches (its linears: o_proj,q_a_proj,q_b_proj,kv_a_proj_with_mqa,"
         "kv_b_proj)"},
        {"deepseek_v3 parallel", A("--model", GCKPT_TEST_DATA "/configs/deepseek-v3.json", "--parallel", "zero3", "--gpus",
                                   "8", "--seq", "512", "-o", "out.json"),
         "are not planned on several GPUs yet (--parallel)"},
        {"gpt_oss flash", A("--model", "gpt-oss-20b", "--seq", "64", "--attention", "flash_attention_2", "-o", "out.json"),
         "not modelled for gpt_oss (attention sinks in the flash kernel)"},
        {"moe imbalance not a number", A("--model", "mixtral-8x7b", "--moe-imbalance", "x", "-o", "out.json"),
         "--moe-imbalance: 'x' is not a factor"},
        {"moe imbalance beyond every token", A("--model", "mixtral-8x7b", "--moe-imbalance", "5", "-o", "out.json"),
         "--moe-imbalance: 5 is outside [1, 4]"},
        {"moe imbalance on a dense model", A("--model", "llama-3.2-1b", "--moe-imbalance", "2", "-o", "out.json"),
         "has no experts"},
        {"unknown layer type", A("--model", "./chunked.json", "-o", "out.json"), "'layer_types'[0]"},
        {"LoRA all-linear on experts", A("--model", "mixtral-8x7b", "--method", "lora", "-o", "out.json"),
         "--lora-targets all-linear on model_type \"mixtral\": peft's all-linear also wraps the router and the experts' "
         "fused gate_up_proj / down_proj parameters (ParamWrapper, run by grouped_mm), which is not modelled; attention "
         "adapters are: --lora-targets q_proj,k_proj,v_proj,o_proj (or a subset)"},
        {"LoRA on an expert name", A("--model", "qwen3-30b-a3b", "--method", "lora", "--lora-targets", "q_proj,down_proj",
                                     "-o", "out.json"),
         "--lora-targets: on model_type \"qwen3_moe\" only the attention projections q_proj,k_proj,v_proj,o_proj are "
         "modelled"},
        {"QLoRA on gpt_oss", A("--model", "gpt-oss-20b", "--method", "qlora", "-o", "out.json"),
         "--method qlora on model_type \"gpt_oss\" is not modelled: its checkpoint is MXFP4-quantized"},
        {"llama names on phi3", A("--model", "phi-3-mini-4k", "--method", "lora", "--lora-targets", "q_proj,v_proj", "-o",
                                  "out.json"),
         "--lora-targets: no linear of phi-3-mini-4k matches (its linears: o_proj,down_proj,qkv_proj,gate_up_proj)"},
        {"gpt2 names on gpt_neox", A("--model", "pythia-1.4b", "--method", "lora", "--lora-targets", "c_attn", "-o",
                                     "out.json"),
         "(its linears: query_key_value,dense,dense_h_to_4h,dense_4h_to_h)"},
        {"flash kernel soft-capping", A("--model", "gemma-2-2b", "--attention", "flash_attention_2", "-o", "out.json"),
         "not modelled for gemma2"},
        {"overflowing sizes", A("--model", "./bigvocab.json", "--allow-long-seq", "--seq", "16777216", "--micro-batch", "65536", "--attention", "eager", "-o", "out.json"), "overflows"},
        {"unknown model name", A("--model", "nope-7b", "-o", "out.json"), "nope-7b"},
        {"model is a directory", A("--model", "./adir.json", "-o", "out.json"), "is a directory"},
        {"model does not exist", A("--model", "./absent.json", "-o", "out.json"), "absent.json"},
        {"unknown gpu", A("--gpu", "tpu-v9", "-o", "out.json"), "tpu-v9"},
        {"gpu missing fields", A("--model", "gpt2", "--gpu", "./gpu-missing.json", "-o", "out.json"), "gpu-missing.json: missing field"},
        {"gpu other schema", A("--model", "gpt2", "--gpu", "./gpu-schema.json", "-o", "out.json"), "gckpt.device/1"},
        {"gpu negative memory", A("--model", "gpt2", "--gpu", "./gpu-neg.json", "-o", "out.json"), "'memory_bytes'"},
        {"seq zero", A("--seq", "0", "-o", "out.json"), "--seq"},
        {"seq negative", A("--seq", "-5", "-o", "out.json"), "--seq"},
        {"seq junk", A("--seq", "4k", "-o", "out.json"), "--seq"},
        {"seq absurd", A("--seq", "99999999999", "-o", "out.json"), "--seq"},
        {"micro-batch list", A("--micro-batch", "1,,2", "-o", "out.json"), "--micro-batch"},
        {"micro-batch zero", A("--micro-batch", "0", "-o", "out.json"), "--micro-batch"},
        {"grad-accum zero", A("--grad-accum", "0", "-o", "out.json"), "--grad-accum"},
        {"both accumulations", A("--grad-accum", "2", "--global-batch", "8", "-o", "out.json"), "exclude each other"},
        {"global batch indivisible", A("--model", "gpt2", "--global-batch", "7", "--micro-batch", "2", "-o", "out.json"), "--global-batch"},
        {"unknown precision", A("--precision", "fp8", "-o", "out.json"), "fp8"},
        {"unknown optimizer", A("--optimizer", "lion", "-o", "out.json"), "lion"},
        {"unknown attention", A("--attention", "flash3", "-o", "out.json"), "flash3"},
        {"bad every-n", A("--every-n", "1,x", "-o", "out.json"), "--every-n"},
        {"every-n too deep", A("--model", "gpt2", "--every-n", "40", "-o", "out.json"), "exceeds"},
        {"bad offload", A("--offload", "maybe", "-o", "out.json"), "--offload"},
        {"bad budget", A("--budget", "lots", "-o", "out.json"), "--budget"},
        {"negative budget", A("--budget", "-80GiB", "-o", "out.json"), "--budget"},
        {"bad margin", A("--margin", "150%", "-o", "out.json"), "--margin"},
        {"unwritable output", A("--model", "gpt2", "--seq", "128", "-o", "/nonexistent-dir/out.json"), "cannot write"},
        {"output is a directory", A("--model", "gpt2", "--seq", "128", "-o", "adir.json"), "is a directory"},
        {"bad plot extension", A("--model", "gpt2", "--seq", "128", "--plot", "plot.gif"), ".png or .svg"},
        {"unexpected argument", A("llama", "-o", "out.json"), "unexpected argument"},
        {"bad table", A("--table", "some", "-o", "out.json"), "--table"},
        /* LoRA / QLoRA (issue 12) */
        {"unknown method", A("--method", "dora", "-o", "out.json"), "--method"},
        {"rank zero", A("--method", "lora", "--lora-rank", "0", "-o", "out.json"), "--lora-rank"},
        {"rank junk", A("--method", "lora", "--lora-rank", "16x", "-o", "out.json"), "--lora-rank"},
        {"alpha negative", A("--method", "lora", "--lora-alpha", "-2", "-o", "out.json"), "--lora-alpha"},
        {"alpha junk", A("--method", "lora", "--lora-alpha", "many", "-o", "out.json"), "--lora-alpha"},
        {"dropout one", A("--method", "lora", "--lora-dropout", "1", "-o", "out.json"), "--lora-dropout"},
        {"dropout junk", A("--method", "lora", "--lora-dropout", "0.1x", "-o", "out.json"), "--lora-dropout"},
        {"unknown target", A("--method", "lora", "--lora-targets", "q_proj,qq_proj", "-o", "out.json"), "qq_proj"},
        {"empty targets", A("--method", "lora", "--lora-targets", "", "-o", "out.json"), "--lora-targets"},
        /* the names the error lists come from the families' table (it named llama's and gpt2's only) */
        {"unknown target lists every family's", A("--method", "lora", "--lora-targets", "qkv", "-o", "out.json"),
         "qkv_proj,gate_up_proj,query_key_value,dense,dense_h_to_4h,dense_4h_to_h"},
        {"unknown module to save lists embed_in", A("--method", "lora", "--modules-to-save", "embed", "-o", "out.json"),
         "embed_in"},
        {"targets of another family", A("--model", "gpt2", "--method", "lora", "--lora-targets", "q_proj", "-o", "out.json"), "no linear of gpt2"},
        {"unknown module to save", A("--method", "lora", "--modules-to-save", "lm_head,norm", "-o", "out.json"), "norm"},
        {"lora option without method", A("--lora-rank", "8", "-o", "out.json"), "needs --method lora or qlora"},
        {"quant without qlora", A("--method", "lora", "--quant", "nf4", "-o", "out.json"), "needs --method qlora"},
        {"unknown quant", A("--method", "qlora", "--quant", "int4", "-o", "out.json"), "int4"},
        {"bad double-quant", A("--method", "qlora", "--double-quant", "yes", "-o", "out.json"), "--double-quant"},
        {"unknown compute dtype", A("--method", "qlora", "--compute-dtype", "fp8", "-o", "out.json"), "fp8"},
        {"unknown quant storage", A("--method", "qlora", "--quant-storage", "fp16", "-o", "out.json"), "fp16"},
        {"quant storage without qlora", A("--method", "lora", "--quant-storage", "bf16", "-o", "out.json"), "needs --method qlora"},
        {"quant storage with int8", A("--method", "qlora", "--quant", "int8", "--quant-storage", "bf16", "-o", "out.json"), "not --quant int8"},
        {"double-quant with int8", A("--method", "qlora", "--quant", "int8", "--double-quant", "on", "-o", "out.json"), "not --quant int8"},
        {"qlora in pure bf16", A("--method", "qlora", "--precision", "bf16", "-o", "out.json"), "prepare_model_for_kbit_training"},
        /* several GPUs (issue 14) */
        {"parallel on one GPU", A("--parallel", "fsdp", "-o", "out.json"), "needs more than one GPU"},
        {"several GPUs without a mode", A("--gpus", "8", "-o", "out.json"), "choose --parallel"},
        {"unknown parallel mode", A("--gpus", "8", "--parallel", "tp", "-o", "out.json"), "'tp'"},
        {"parallel list with a hole", A("--gpus", "8", "--parallel", "ddp,,fsdp", "-o", "out.json"), "--parallel"},
        {"parallel none on several GPUs", A("--gpus", "8", "--parallel", "none", "-o", "out.json"), "--parallel none"},
        {"gpus zero", A("--gpus", "0", "--parallel", "ddp", "-o", "out.json"), "--gpus"},
        {"nodes junk", A("--nodes", "2x", "--parallel", "ddp", "-o", "out.json"), "--nodes"},
        {"deepspeed on one GPU", A("--deepspeed", "./ds-z3.json", "-o", "out.json"), "--deepspeed needs more than one GPU"},
        {"deepspeed file missing", A("--gpus", "2", "--deepspeed", "./absent.json", "-o", "out.json"), "absent.json"},
        {"deepspeed malformed", A("--gpus", "2", "--deepspeed", "./malformed.json", "-o", "out.json"), "malformed JSON"},
        {"deepspeed without zero", A("--gpus", "2", "--deepspeed", "./ds-nozero.json", "-o", "out.json"), "'zero_optimization'"},
        {"deepspeed stage 4", A("--gpus", "2", "--deepspeed", "./ds-stage4.json", "-o", "out.json"), "zero_optimization.stage"},
        {"deepspeed bucket fraction", A("--gpus", "2", "--deepspeed", "./ds-frac.json", "-o", "out.json"), "zero_optimization.reduce_bucket_size"},
        {"fsdp-offload junk", A("--gpus", "2", "--parallel", "fsdp", "--fsdp-offload", "yes", "-o", "out.json"), "--fsdp-offload: 'yes'"},
        {"fsdp-offload under zero3", A("--gpus", "2", "--parallel", "zero3", "--fsdp-offload", "on", "-o", "out.json"), "--fsdp-offload needs --parallel fsdp"},
        {"fsdp-offload on one GPU", A("--fsdp-offload", "on", "-o", "out.json"), "--fsdp-offload needs --parallel fsdp"},
        {"deepspeed offload to nvme", A("--gpus", "2", "--deepspeed", "./ds-offload.json", "-o", "out.json"), "'zero_optimization.offload_param.device'"},
        {"deepspeed offload_param under zero1", A("--gpus", "2", "--deepspeed", "./ds-off-param-z1.json", "-o", "out.json"), "'zero_optimization.offload_param': ZeRO-3 only"},
        {"deepspeed offload without a ds optimizer", A("--gpus", "2", "--deepspeed", "./ds-off-noopt.json", "-o", "out.json"), "field 'optimizer' is missing"},
        {"deepspeed offload unpinned", A("--gpus", "2", "--deepspeed", "./ds-off-unpinned.json", "-o", "out.json"), "'zero_optimization.offload_optimizer.pin_memory'"},
        {"deepspeed offload not an object", A("--gpus", "2", "--deepspeed", "./ds-off-notobj.json", "-o", "out.json"), "'zero_optimization.offload_param.device'"},
        {"deepspeed overlap_comm junk", A("--gpus", "2", "--deepspeed", "./ds-overlap-bad.json", "-o", "out.json"), "'zero_optimization.overlap_comm'"},
        {"deepspeed ZeRO++ hpZ", A("--gpus", "2", "--deepspeed", "./ds-hpz.json", "-o", "out.json"), "'zero_optimization.zero_hpz_partition_size'"},
        {"deepspeed ZeRO++ qgZ", A("--gpus", "2", "--deepspeed", "./ds-qgrad.json", "-o", "out.json"), "'zero_optimization.zero_quantized_gradients'"},
        {"deepspeed non-contiguous gradients", A("--gpus", "2", "--deepspeed", "./ds-noncontig.json", "-o", "out.json"), "'zero_optimization.contiguous_gradients'"},
        {"deepspeed plain linear", A("--gpus", "2", "--deepspeed", "./ds-nomelinear.json", "-o", "out.json"), "'zero_optimization.memory_efficient_linear'"},
        {"deepspeed fp32 accumulation", A("--gpus", "2", "--deepspeed", "./ds-accum32.json", "-o", "out.json"), "'data_types.grad_accum_dtype'"},
        {"deepspeed partial offload", A("--gpus", "2", "--deepspeed", "./ds-ratio.json", "-o", "out.json"), "'zero_optimization.offload_optimizer.ratio'"},
        {"deepspeed fp16", A("--gpus", "2", "--deepspeed", "./ds-fp16.json", "-o", "out.json"), "fp16.enabled"},
        {"deepspeed bf16 off, amp-bf16 asked", A("--gpus", "2", "--deepspeed", "./ds-nobf16.json", "-o", "out.json"), "--precision fp32"},
        {"deepspeed stage against --parallel", A("--gpus", "2", "--parallel", "zero2", "--deepspeed", "./ds-z3.json", "-o", "out.json"), "contradicts --deepspeed"},
        {"too many GPUs", A("--gpus", "1024", "--nodes", "1024", "--parallel", "ddp", "-o", "out.json"), "more than 65536 GPUs"},
        {"a list of modes with -o", A("--gpus", "8", "--parallel", "ddp,fsdp", "-o", "out.json"), "one mode"},
        /* LoRA / QLoRA on several GPUs: what FINDINGS R-DISTPEFT did not measure */
        {"parallel LoRA fp32", A("--gpus", "2", "--parallel", "ddp", "--method", "lora", "--precision", "fp32", "-o", "out.json"), "only --precision amp-bf16"},
        {"parallel QLoRA fp32 fsdp", A("--gpus", "2", "--parallel", "fsdp", "--method", "qlora", "--precision", "fp32", "-o", "out.json"), "or fp32 with --method lora under fsdp"},
        {"parallel LoRA modules_to_save", A("--gpus", "2", "--parallel", "zero2", "--method", "lora", "--modules-to-save", "lm_head", "-o", "out.json"), "--modules-to-save"},
        {"parallel QLoRA int8", A("--gpus", "2", "--parallel", "zero3", "--method", "qlora", "--quant", "int8", "-o", "out.json"), "--quant int8"},
        {"parallel SGD", A("--gpus", "2", "--parallel", "zero2", "--optimizer", "sgd", "-o", "out.json"), "--optimizer adamw"},
        {"parallel pure bf16", A("--gpus", "2", "--parallel", "fsdp", "--precision", "bf16", "-o", "out.json"), "amp-bf16"},
        {"gpu without interconnect", A("--model", "gpt2", "--gpus", "2", "--parallel", "ddp", "--gpu", "./gpu-nolink.json", "-o", "out.json"), "intra_node_bus_bytes_per_s"},
        /* the ParallelismConfig mesh (HSDP): accelerate's checks, and what is not planned yet */
        {"mesh not the world", A("--gpus", "4", "--dp-replicate", "2", "--dp-shard", "4", "-o", "out.json"), "not the 4 processes"},
        {"mesh replicate alone", A("--gpus", "4", "--dp-replicate", "2", "-o", "out.json"), "dp_shard_size 1 = 2"},
        {"mesh no shard", A("--gpus", "4", "--dp-replicate", "4", "--dp-shard", "1", "-o", "out.json"), "no dimension to shard"},
        /* TP x FSDP (FINDINGS R-TP-8): accelerate's world check, transformers' own FSDP2, what is not measured */
        {"tp x fsdp not the world", A("--gpus", "8", "--dp-shard", "2", "--tp", "2", "-o", "out.json"), "tp_size 2 x cp_size 1 x sp_size 1 = 4, not the 8 processes"},
        {"tp x fsdp under fsdp", A("--gpus", "4", "--dp-shard", "2", "--tp", "2", "--parallel", "fsdp", "-o", "out.json"), "no --parallel"},
        /* several nodes: a group that spans them needs the profile's inter-node bandwidth (gckpt/core/mesh.h) */
        {"tp x fsdp nodes without network", A("--gpus", "2", "--nodes", "2", "--dp-shard", "2", "--tp", "2", "--gpu", "./gpu-nonet.json", "-o", "out.json"), "field 'inter_node_bus_bytes_per_s' is missing"},
        {"tp nodes without network", A("--gpus", "2", "--nodes", "2", "--tp", "4", "--gpu", "./gpu-nonet.json", "-o", "out.json"), "--tp 4 on x: the GPU profile has no inter_node_bus_bytes_per_s"},
        {"tp x fsdp q/k norms", A("--model", "qwen3-8b", "--gpus", "4", "--dp-shard", "2", "--tp", "2", "-o", "out.json"), "without q / k norms"},
        /* LoRA / QLoRA under TP (FINDINGS R-TP-12..15): measured to fail, or not measured */
        {"tp LoRA all-linear", A("--gpus", "2", "--tp", "2", "--method", "lora", "-o", "out.json"), "--method lora with o_proj (rowwise in the tp_plan)"},
        {"tp LoRA rowwise fails", A("--gpus", "2", "--tp", "2", "--method", "lora", "--lora-targets", "q_proj,down_proj", "-o", "out.json"), "down_proj (rowwise in the tp_plan): peft sizes its lora_A by the local shard (peft tuners/tuners_utils.py:186) but transformers' RowwiseParallel wraps the input by lora_A.in_features (transformers distributed/tensor_parallel.py:261), so the first forward fails (FINDINGS R-TP-13)"},
        {"tp LoRA x fsdp", A("--gpus", "4", "--tp", "2", "--dp-shard", "2", "--method", "lora", "--lora-targets", "q_proj,v_proj", "-o", "out.json"), "--tp 2 --dp-shard 2 --method lora: transformers applies fully_shard at load, before get_peft_model, and peft sizes each adapter by the base weight's local piece, which FSDP2 has cut again (peft tuners/tuners_utils.py:186: lora_B [out / (T x S), r] under a [out / T] TP shard), so the first forward fails (FINDINGS R-TP-16)"},
        {"tp LoRA x ddp", A("--gpus", "4", "--tp", "2", "--dp-replicate", "2", "--method", "lora", "--lora-targets", "q_proj,v_proj", "-o", "out.json"), "--tp 2 --dp-replicate 2 --method lora: the Trainer averages over the replicas only the trainable parameters that are not DTensors (transformers trainer.py:2632-2660), so each replica trains its own lora_B (the TP-sharded half of every adapter) on its own batch (FINDINGS R-TP-17)"},
        {"hsdp x tp LoRA", A("--gpus", "8", "--tp", "2", "--dp-replicate", "2", "--dp-shard", "2", "--method", "lora", "--lora-targets", "q_proj,v_proj", "-o", "out.json"), "(FINDINGS R-TP-16)"},
        {"tp LoRA qwen3", A("--model", "qwen3-8b", "--gpus", "2", "--tp", "2", "--method", "lora", "--lora-targets", "q_proj,v_proj", "-o", "out.json"), "on a model with q / k norms (qwen3) is not measured"},
        {"tp LoRA modules_to_save", A("--gpus", "2", "--tp", "2", "--method", "lora", "--lora-targets", "q_proj", "--modules-to-save", "lm_head", "-o", "out.json"), "--tp 2 --method lora with --modules-to-save is not measured"},
        /* TP's optimizers and precisions (FINDINGS R-TP-22, R-TP-23): the reason each is not planned */
        {"tp adamw-8bit", A("--gpus", "2", "--tp", "2", "--optimizer", "adamw-8bit", "-o", "out.json"), "--tp 2 --optimizer adamw-8bit: bitsandbytes' optimizer_update_8bit_blockwise gets the DTensor parameter, gradient and states with plain quantization maps and absmax (bitsandbytes optim/optimizer.py:570, functional.py:1192): the first step fails (got mixed torch.Tensor and DTensor) (FINDINGS R-TP-23)"},
        {"tp paged-adamw-8bit", A("--gpus", "2", "--tp", "2", "--optimizer", "paged-adamw-8bit", "-o", "out.json"), "--optimizer paged-adamw-8bit: bitsandbytes' optimizer_update_8bit_blockwise gets the DTensor parameter"},
        {"tp paged-adamw-32bit", A("--gpus", "2", "--tp", "2", "--optimizer", "paged-adamw-32bit", "-o", "out.json"), "optimizer_update_32bit has no DTensor sharding strategy"},
        {"tp adamw-foreach", A("--gpus", "2", "--tp", "2", "--optimizer", "adamw-foreach", "-o", "out.json"), "the TP shards are DTensors, so the Trainer's adamw_torch runs the single-tensor loop"},
        {"tp x fsdp sgd", A("--gpus", "4", "--tp", "2", "--dp-shard", "2", "--optimizer", "sgd", "-o", "out.json"), "--tp 2 --optimizer sgd with --dp-shard or --dp-replicate: SGD is measured under TP alone (FINDINGS R-TP-23)"},
        {"tp amp-fp16", A("--gpus", "2", "--tp", "2", "--precision", "amp-fp16", "-o", "out.json"), "--tp 2 with --precision other than fp32, bf16 and amp-bf16"},
        {"hsdp x tp pure bf16", A("--gpus", "8", "--tp", "2", "--dp-replicate", "2", "--dp-shard", "2", "--precision", "bf16", "-o", "out.json"), "--tp 2 --dp-replicate 2 --dp-shard 2 --precision bf16: HSDP x TP under pure bf16 is not measured"},
        {"tp QLoRA", A("--gpus", "2", "--tp", "2", "--method", "qlora", "--lora-targets", "q_proj,v_proj", "-o", "out.json"), "the Linear4bit forward asserts (bitsandbytes nn/modules.py:498) and get_peft_model fails (peft tuners/lora/bnb.py:585) (FINDINGS R-TP-14)"},
        /* context parallelism (FINDINGS R-CP): accelerate's checks, torch's and the Trainer's refusals, what is not measured */
        {"cp not the world", A("--gpus", "4", "--cp", "2", "-o", "out.json"), "cp_size 2 x sp_size 1 = 2, not the 4 processes"},
        {"cp uneven sequence", A("--gpus", "2", "--cp", "2", "--seq", "4095", "-o", "out.json"), "R-CP-4"},
        {"cp eager", A("--gpus", "2", "--cp", "2", "--attention", "eager", "-o", "out.json"), "only with SDPA"},
        {"cp sliding window", A("--model", "gemma-2-2b", "--gpus", "2", "--cp", "2", "-o", "out.json"), "sliding-window"},
        {"cp tied head", A("--model", "llama-3.2-1b", "--gpus", "2", "--cp", "2", "-o", "out.json"), "tied lm_head"},
        {"cp x tp", A("--gpus", "4", "--cp", "2", "--tp", "2", "-o", "out.json"), "cp_size 2 with tp_size 2: transformers' TP loader builds a (pp, dp_replicate, fsdp, tp) mesh with no cp dimension that must span the world (distributed/utils.py:315), and the Trainer sets tp_size and dp_shard_size from it (trainer.py:789), so the sizes exceed the processes and accelerate refuses (parallelism_config.py:373) (FINDINGS R-CP-19)"},
        {"cp x hsdp not the world", A("--gpus", "4", "--dp-replicate", "2", "--dp-shard", "2", "--cp", "2", "-o", "out.json"), "cp_size 2 x sp_size 1 = 8, not the 4 processes"},
        {"cp pure dp", A("--gpus", "4", "--dp-replicate", "2", "--cp", "2", "-o", "out.json"), "cannot be used with pure data parallelism"},
        {"cp nodes without network", A("--gpus", "2", "--nodes", "2", "--cp", "4", "--gpu", "./gpu-nonet.json", "-o", "out.json"), "--cp 4 on x: the GPU profile has no inter_node_bus_bytes_per_s"},
        {"cp fsdp offload", A("--gpus", "2", "--cp", "2", "--fsdp-offload", "on", "-o", "out.json"), "--cp 2 with --fsdp-offload"},
        {"cp without bandwidth", A("--gpus", "2", "--cp", "2", "--gpu", "./gpu-nolink.json", "-o", "out.json"), "intra_node_bus_bytes_per_s"},
        /* with tp or cp: accelerate's own checks before the refusal (FINDINGS R-TP-1) */
        {"mesh tp not the world", A("--gpus", "4", "--tp", "2", "-o", "out.json"), "tp_size 2 x cp_size 1 x sp_size 1 = 2, not the 4 processes"},
        /* accelerate's own ParallelismConfig refuses TP with pure data parallelism; --tp with --dp-replicate is
         * transformers' DistributedConfig(dp_replicate_size), planned (R-TP-11) */
        {"mesh file tp pure dp", A("--gpus", "4", "--parallelism-config", "./pc-ddp-tp.json", "-o", "out.json"), "cannot be used with pure data parallelism"},
        {"tp x ddp not the world", A("--gpus", "8", "--dp-replicate", "2", "--tp", "2", "-o", "out.json"), "--tp 2 --dp-replicate 2 (x --dp-shard): their product is not the processes"},
        {"tp x ddp under fsdp", A("--gpus", "4", "--dp-replicate", "2", "--tp", "2", "--parallel", "fsdp", "-o", "out.json"), "no --parallel"},
        {"tp x ddp nodes without network", A("--gpus", "2", "--nodes", "2", "--dp-replicate", "2", "--tp", "2", "--gpu", "./gpu-nonet.json", "-o", "out.json"), "field 'inter_node_bus_bytes_per_s' is missing"},
        {"tp x ddp q/k norms", A("--model", "qwen3-8b", "--gpus", "4", "--dp-replicate", "2", "--tp", "2", "-o", "out.json"), "--tp 2 --dp-replicate 2: TP x FSDP / DDP is measured on llama-like models without q / k norms"},
        {"mesh tp under ddp", A("--gpus", "2", "--tp", "2", "--parallel", "ddp", "-o", "out.json"), "no --parallel"},
        {"tp kv heads", A("--gpus", "16", "--tp", "16", "-o", "out.json"), "num_key_value_heads 8"},
        {"tp tied head", A("--model", "llama-3.2-1b", "--gpus", "2", "--tp", "2", "-o", "out.json"), "tied lm_head"},
        {"tp without bandwidth", A("--gpus", "2", "--tp", "2", "--gpu", "./gpu-nolink.json", "-o", "out.json"), "intra_node_bus_bytes_per_s"},
        {"mesh under zero3", A("--gpus", "4", "--parallel", "zero3", "--dp-replicate", "2", "--dp-shard", "2", "-o", "out.json"), "--parallel fsdp alone"},
        {"mesh under a list", A("--gpus", "4", "--parallel", "ddp,fsdp", "--dp-replicate", "2", "--dp-shard", "2", "-q"), "--parallel fsdp alone"},
        {"mesh on one GPU", A("--dp-replicate", "1", "--dp-shard", "1", "-o", "out.json"), "more than one GPU"},
        {"mesh junk", A("--gpus", "4", "--dp-replicate", "two", "--dp-shard", "2", "-o", "out.json"), "--dp-replicate: 'two'"},
        {"mesh file and flags", A("--gpus", "4", "--parallelism-config", "./pc-ok.json", "--dp-shard", "4", "-o", "out.json"), "excludes"},
        {"mesh file tp x cp", A("--gpus", "4", "--parallelism-config", "./pc-tp-cp.json", "-o", "out.json"), "pc-tp-cp.json: ParallelismConfig: cp_size 2 with tp_size 2: transformers' TP loader builds a (pp, dp_replicate, fsdp, tp) mesh with no cp dimension that must span the world (distributed/utils.py:315), and the Trainer sets tp_size and dp_shard_size from it (trainer.py:789), so the sizes exceed the processes and accelerate refuses (parallelism_config.py:373) (FINDINGS R-CP-19)"},
        {"mesh file tp x hsdp", A("--gpus", "8", "--parallelism-config", "./pc-hsdp-tp.json", "-o", "out.json"), "pc-hsdp-tp.json: ParallelismConfig: tensor"},
        {"mesh file tp x fsdp not the world", A("--gpus", "8", "--parallelism-config", "./pc-tp.json", "-o", "out.json"), "pc-tp.json: ParallelismConfig: dp_replicate_size 1 x dp_shard_size 2 x tp_size 2"},
        {"mesh file odd", A("--gpus", "4", "--parallelism-config", "./pc-odd.json", "-o", "out.json"), "pc-odd.json: ParallelismConfig: dp_replicate_size 3"},
        {"mesh file key", A("--gpus", "4", "--parallelism-config", "./pc-key.json", "-o", "out.json"), "field 'dp_shard' is not"},
        {"mesh file zero", A("--gpus", "4", "--parallelism-config", "./pc-zero.json", "-o", "out.json"), "dp_replicate_size"},
        {"mesh with LoRA", A("--gpus", "4", "--dp-replicate", "2", "--dp-shard", "2", "--method", "lora", "--modules-to-save", "lm_head", "-o", "out.json"), "--modules-to-save is not measured on several GPUs"},
        {"mesh file missing", A("--gpus", "4", "--parallelism-config", "./pc-none.json", "-o", "out.json"), "pc-none.json"},
        {"gpu without network", A("--model", "gpt2", "--gpus", "2", "--nodes", "2", "--parallel", "ddp", "--gpu", "./gpu-nolink.json", "-o", "out.json"), "inter_node_bus_bytes_per_s"},
    };
    char err[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i].args, err, sizeof err);
        if (rc != 2) fail_msg("%s: exit %d (stderr: %s)", cases[i].what, rc, err);
        size_t len = strlen(err);
        if (len == 0 || err[len - 1] != '\n' || memchr(err, '\n', len - 1))
            fail_msg("%s: stderr is not one line: '%s'", cases[i].what, err);
        if (!strstr(err, cases[i].needle)) fail_msg("%s: '%s' does not mention '%s'", cases[i].what, err, cases[i].needle);
        if (cli_exists("out.json")) fail_msg("%s: out.json was created", cases[i].what);
    }
    printf("%zu hostile inputs rejected\n", sizeof cases / sizeof cases[0]);
}

static void existing_output_untouched(void **state)
{
    (void)state;
    cli_write("keep.json", "precious");
    char err[4096];
    assert_int_equal(run(A("--model", "./malformed.json", "-o", "keep.json"), err, sizeof err), 2);
    char path[512];
    snprintf(path, sizeof path, "%s/keep.json", cli_dir);
    FILE *f = fopen(path, "r");
    char buf[32] = {0};
    assert_non_null(f);
    assert_true(fread(buf, 1, sizeof buf - 1, f) > 0);
    fclose(f);
    assert_string_equal(buf, "precious");
}

static void good_runs(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(run(A("--help"), err, sizeof err), 0);
    assert_int_equal(run(A("--version"), err, sizeof err), 0);
    assert_int_equal(run(A("--list"), err, sizeof err), 0);
    assert_int_equal(run(A("--model", "gpt2", "--seq", "256", "--micro-batch", "1,2", "-o", "plan.json"), err, sizeof err), 0);
    assert_true(cli_exists("plan.json"));
    assert_int_equal(run(A("--model", "gpt2", "--seq", "256", "--budget", "1GiB", "-q", "-o", "small.json"), err, sizeof err), 0);
    assert_true(cli_exists("small.json"));
    /* the plot's data and script are written whether or not gnuplot is installed */
    assert_int_equal(run(A("--model", "gpt2", "--seq", "256", "-q", "--plot", "p.svg"), err, sizeof err), 0);
    assert_true(cli_exists("p.svg.gp"));
    assert_true(cli_exists("p.svg.entries.dat"));
    assert_true(cli_exists("p.svg.timeline.dat"));
    assert_int_equal(run(A("--bogus"), err, sizeof err), 2);
    /* CP x HSDP (FINDINGS R-CP-17): FSDP2 over dp_shard x cp, replicated over dp_replicate */
    assert_int_equal(run(A("--gpus", "8", "--dp-replicate", "2", "--dp-shard", "2", "--cp", "2", "--seq", "4096",
                           "-o", "cphsdp.json"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "ParallelismConfig(dp_replicate_size=2, dp_shard_size=2, cp_size=2)"));
    assert_non_null(strstr(cli_out, "dp_replicate 2 x dp_shard_cp 4"));
    /* CP x HSDP with LoRA, QLoRA and activation offload (FINDINGS R-CP-27; refused before): planned, and the
     * default sweep keeps activation offload's rows */
    assert_int_equal(run(A("--gpus", "8", "--dp-replicate", "2", "--dp-shard", "2", "--cp", "2", "--seq", "4096",
                           "--method", "lora", "--lora-targets", "q_proj,v_proj", "--table", "all", "-o", "cphsdpl.json"),
                         err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "ParallelismConfig(dp_replicate_size=2, dp_shard_size=2, cp_size=2)"));
    assert_non_null(strstr(cli_out, " on  "));
    assert_int_equal(run(A("--gpus", "8", "--dp-replicate", "2", "--dp-shard", "2", "--cp", "2", "--seq", "4096",
                           "--method", "qlora", "--offload", "on", "-o", "cphsdpq.json"), err, sizeof err), 0);
    assert_int_equal(run(A("--gpus", "8", "--dp-replicate", "2", "--dp-shard", "2", "--cp", "2", "--seq", "4096",
                           "--offload", "on", "-o", "cphsdpo.json"), err, sizeof err), 0);
    assert_true(cli_exists("cphsdpo.json"));
    /* several nodes, once refused (FINDINGS R-TP-26, R-TP-27, R-CP-15): TP inside a node x FSDP across
     * nodes, TP x DDP, TP across nodes and CP across nodes are planned, each group placed in the header
     * and multi_node_unverified said */
    static const struct {
        const char *args[16], *groups;
    } multi[] = {
        {{"--gpus", "2", "--nodes", "2", "--dp-shard", "2", "--tp", "2", "-o", "mn1.json"},
         "dp_shard 2 (ranks 2 apart) across nodes at inter_node_bus_bytes_per_s 50 GB/s; tp 2 (ranks 1 apart) inside a node"},
        {{"--gpus", "2", "--nodes", "2", "--dp-replicate", "2", "--tp", "2", "-o", "mn2.json"},
         "dp_replicate 2 (ranks 2 apart) across nodes at inter_node_bus_bytes_per_s 50 GB/s; tp 2 (ranks 1 apart) inside a node"},
        {{"--gpus", "2", "--nodes", "2", "--tp", "4", "-o", "mn3.json"},
         "tp 4 (ranks 1 apart) across nodes at inter_node_bus_bytes_per_s 50 GB/s"},
        {{"--gpus", "2", "--nodes", "2", "--dp-shard", "2", "--cp", "2", "-o", "mn4.json"},
         "dp_shard_cp 4 (ranks 1 apart) across nodes at inter_node_bus_bytes_per_s 50 GB/s; cp 2 (ranks 1 apart) inside a node"},
    };
    for (size_t i = 0; i < sizeof multi / sizeof multi[0]; i++) {
        char *argv[24] = {"--model", "llama-3.1-8b", "--seq", "4096", "--every-n", "1", "--gpu", "h100-sxm-80gb"};
        for (int k = 0; multi[i].args[k]; k++) argv[8 + k] = (char *)multi[i].args[k];
        if (run(argv, err, sizeof err)) fail_msg("%s: %s", multi[i].groups, err);
        if (!strstr(cli_out, multi[i].groups)) fail_msg("no '%s' in:\n%s", multi[i].groups, cli_out);
        assert_non_null(strstr(cli_out, "warning [multi_node_unverified]"));
    }
    /* without gnuplot: a clear message, and the script and data are still written */
    assert_int_equal(cli_run(GCKPT_PLAN_EXE, A("--model", "gpt2", "--seq", "256", "-q", "--plot", "q.png"), "/nonexistent", err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "gnuplot is not installed"));
    assert_true(cli_exists("q.png.gp"));
    assert_false(cli_exists("q.png"));
    /* LLaVA: planned across the vision tower and the text model, the header's image line, the
     * snippet's class; the frozen tower in the snippet */
    assert_int_equal(run(A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--seq", "1024", "--vision-tower",
                           "frozen", "--budget", "200GiB", "-o", "llava.json"), err, sizeof err), 0);
    assert_true(cli_exists("llava.json"));
    assert_non_null(strstr(cli_out, "llava: 1 image(s) of 336x336 per sample, 1 tile(s) each, 576 image tokens + 448 "
                                    "text tokens per sample; vision tower frozen (24 layers, 23 reach the projector)"));
    assert_non_null(strstr(cli_out, "model = AutoModelForImageTextToText.from_pretrained("));
    assert_non_null(strstr(cli_out, "model.model.vision_tower.requires_grad_(False)"));
    /* --checkpoint-towers text: every_n from text layer 0, the tower plain; the table's V+T
     * cell, the per-layer code and the Trainer's checkpointing off, in the JSON too */
    assert_int_equal(run(A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--seq", "1024", "--every-n", "2",
                           "--offload", "off", "--checkpoint-towers", "text", "--budget", "200GiB", "-o", "towers.json"),
                         err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "checkpointed vision layers none; text layers 0,2,4,6,8,10,12,14,16,18,20,22,... "
                                    "(16 layers) (--checkpoint-towers text"));
    assert_non_null(strstr(cli_out, " 0+16 "));
    assert_non_null(strstr(cli_out, "    m.gradient_checkpointing = i % 2 == 0\n"));
    assert_non_null(strstr(cli_out, "    gradient_checkpointing=False,\n"));
    assert_null(strstr(cli_out, "\"every_n_layers\": 2"));
    {
        char *tj = cli_slurp("towers.json");
        assert_non_null(tj);
        assert_non_null(strstr(tj, "\"checkpoint_towers\":\t\"text\""));
        assert_non_null(strstr(tj, "\"vision_checkpointed_layers\":\t[]"));
        assert_non_null(strstr(tj, "\"gradient_checkpointing\":\tfalse"));
        assert_null(strstr(tj, "\"gradient_checkpointing\":\ttrue"));
        free(tj);
    }
    /* QLoRA on LLaVA: planned (the tower's and the projector's linears 4-bit too, FINDINGS R-VLM-92),
     * the adapters on the text model, the snippet loading the VLM in 4 bits */
    assert_int_equal(run(A("--model", GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", "--seq", "1024", "--method", "qlora",
                           "-o", "llava-qlora.json"), err, sizeof err), 0);
    assert_true(cli_exists("llava-qlora.json"));
    assert_non_null(strstr(cli_out, "qlora r 16 alpha 32 dropout 0.05 all-linear of the text model"));
    assert_non_null(strstr(cli_out, "model = AutoModelForImageTextToText.from_pretrained(..., attn_implementation=\"sdpa\", "
                                    "quantization_config=bnb"));
    /* LoRA on Gemma 3's text model: planned (FINDINGS R-VLM-93), the regex in the snippet */
    assert_int_equal(run(A("--model", GCKPT_TEST_DATA "/configs/gemma-3-4b.json", "--seq", "2048", "--method", "lora",
                           "--gpu", "h100-sxm-80gb", "-o", "gemma3-lora.json"), err, sizeof err), 0);
    assert_true(cli_exists("gemma3-lora.json"));
    assert_non_null(strstr(cli_out, "lora r 16 alpha 32 dropout 0.05 all-linear of the text model, 29802496 trainable"));
    assert_non_null(strstr(cli_out, "target_modules=r\"model\\.language_model.*\\.(q_proj|"));
    /* Qwen3-VL: planned at an image size; a frozen tower's snippet unfreezes both mergers */
    assert_int_equal(run(A("--model", GCKPT_TEST_DATA "/configs/qwen3-vl-4b.json", "--seq", "1024", "--image-size",
                           "448x448", "--vision-tower", "frozen", "--budget", "200GiB", "-o", "qwen3vl.json"),
                         err, sizeof err), 0);
    assert_true(cli_exists("qwen3vl.json"));
    assert_non_null(strstr(cli_out, "196 image tokens + 828 text tokens per sample"));
    assert_non_null(strstr(cli_out, "model.model.visual.deepstack_merger_list.requires_grad_(True)"));
    /* Gemma 3: any image size resized to the tower's 896, mm_tokens_per_image tokens each */
    assert_int_equal(run(A("--model", GCKPT_TEST_DATA "/configs/gemma-3-4b.json", "--seq", "2048", "--images", "2",
                           "--image-size", "480x640", "--gpu", "h100-sxm-80gb", "-o", "gemma3.json"), err, sizeof err), 0);
    assert_true(cli_exists("gemma3.json"));
    assert_non_null(strstr(cli_out, "gemma3: 2 image(s) of 480x640 per sample, 1 tile(s) each, 512 image tokens + 1536 "
                                    "text tokens per sample; vision tower trained (27 layers, 27 reach the projector), "
                                    "text model 34 layers; 256 tokens per image (mm_tokens_per_image)"));
    assert_non_null(strstr(cli_out, "model = AutoModelForImageTextToText.from_pretrained("));
    /* Llama 3.2 Vision: planned (its tower's four tiles per image, no vision checkpointing layer) */
    assert_int_equal(run(A("--model", GCKPT_TEST_DATA "/configs/llama-3.2-11b-vision.json", "--seq", "2048", "--gpu",
                           "h100-sxm-80gb", "-o", "mllama.json"), err, sizeof err), 0);
    assert_true(cli_exists("mllama.json"));
    assert_non_null(strstr(cli_out, "mllama: 1 image(s) of 560x560 per sample, 4 tile(s) each, 1 image tokens + 2047 "
                                    "text tokens per sample; vision tower trained (40 layers, 40 reach the projector), "
                                    "text model 40 layers"));
    assert_non_null(strstr(cli_out, "no vision layer is a checkpointing layer"));
    /* -o - puts the JSON alone on stdout */
    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--every-n", "off,1", "-o", "-"), err, sizeof err), 0);
    assert_true(cli_out[0] == '{');
    assert_non_null(strstr(cli_out, "\"gckpt.plan/2\""));
    assert_non_null(strstr(err, "Recommended")); /* the table went to stderr */
    /* ZeRO-2 offload_optimizer is planned (refused before: FINDINGS R-OFFLOAD-7), warned unverified */
    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--gpus", "2", "--deepspeed", "./ds-off-z2.json", "-o",
                           "z2off.json"), err, sizeof err), 0);
    assert_true(cli_exists("z2off.json"));
    assert_non_null(strstr(cli_out, "parallel_offload_unverified"));
    /* FSDP2's CPU offload with QLoRA is planned (refused before: FINDINGS R-DISTPEFT-12), warned with what is
     * unverified, its snippet naming the host copies and the whole-model load */
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "128", "--gpus", "2", "--parallel", "fsdp", "--method",
                           "qlora", "--quant-storage", "bf16", "--fsdp-offload", "on", "-o", "qoff.json"), err, sizeof err), 0);
    assert_true(cli_exists("qoff.json"));
    assert_non_null(strstr(cli_out, "CPU offload with LoRA / QLoRA is planned from torch's and DeepSpeed's source"));
    assert_non_null(strstr(cli_out, "# cpu_offload: every shard, frozen ones too"));
    assert_non_null(strstr(cli_out, "\"cpu_offload\": True"));
    /* ZeRO-1 / 2 / 3 offload with LoRA / QLoRA is planned (refused before: FINDINGS R-DISTPEFT-15, -16, -18, -19) */
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "128", "--gpus", "2", "--method", "lora", "--deepspeed",
                           "./ds-off-z2.json", "-o", "z2lora.json"), err, sizeof err), 0);
    assert_true(cli_exists("z2lora.json"));
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "128", "--gpus", "2", "--method", "lora", "--deepspeed",
                           "./ds-off-z1.json", "-o", "z1lora.json"), err, sizeof err), 0);
    assert_true(cli_exists("z1lora.json"));
    assert_non_null(strstr(cli_out, "under ZeRO-2 / ZeRO-3 the adapters' fp32 master"));
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "128", "--gpus", "2", "--method", "lora", "--deepspeed",
                           "./ds-off-z3p.json", "-o", "z3lora.json"), err, sizeof err), 0);
    assert_true(cli_exists("z3lora.json"));
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "128", "--gpus", "2", "--method", "qlora", "--deepspeed",
                           "./ds-off-z3p.json", "-o", "z3qlora.json"), err, sizeof err), 0);
    assert_true(cli_exists("z3qlora.json"));
    /* FSDP2's CPU offload with LoRA over accelerate's HSDP mesh is planned (refused before: FINDINGS R-DISTPEFT-17) */
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "128", "--gpus", "4", "--dp-replicate", "2", "--dp-shard",
                           "2", "--method", "lora", "--fsdp-offload", "on", "-o", "hsdplora.json"), err, sizeof err), 0);
    assert_true(cli_exists("hsdplora.json"));
    assert_non_null(strstr(cli_out, "parallel_offload_unverified"));
    /* fp32 LoRA under FSDP2 and HSDP without CP is planned (refused before: FINDINGS R-DISTPEFT-24) */
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "128", "--gpus", "2", "--parallel", "fsdp", "--method",
                           "lora", "--precision", "fp32", "-o", "fsdpfp32.json"), err, sizeof err), 0);
    assert_true(cli_exists("fsdpfp32.json"));
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "128", "--gpus", "4", "--dp-replicate", "2", "--dp-shard",
                           "2", "--method", "lora", "--precision", "fp32", "-o", "hsdpfp32.json"), err, sizeof err), 0);
    assert_true(cli_exists("hsdpfp32.json"));
    /* a tied head under zero3 / fsdp is planned (refused before) */
    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--gpus", "2", "--parallel", "zero3", "-o", "tied.json"),
                         err, sizeof err), 0);
    assert_true(cli_exists("tied.json"));
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "128", "--gpus", "2", "--parallel", "fsdp", "-o",
                           "tiedf.json"), err, sizeof err), 0);
    assert_true(cli_exists("tiedf.json"));
    /* HSDP: the mesh from the flags or from a ParallelismConfig file plans the same; the snippet
     * builds the ParallelismConfig in TrainingArguments (transformers 5.24, accelerate 1.15) */
    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--gpus", "4", "--dp-replicate", "2", "--dp-shard", "2",
                           "--every-n", "1", "--offload", "off", "-o", "hsdp.json"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "parallelism_config=ParallelismConfig(dp_replicate_size=2, dp_shard_size=2),"));
    assert_non_null(strstr(cli_out, "from accelerate import ParallelismConfig"));
    assert_non_null(strstr(cli_out, "fsdp=True"));
    assert_non_null(strstr(cli_out, "dp_replicate 2 x dp_shard 2"));
    char *a = cli_slurp("hsdp.json");
    assert_int_equal(run(A("--model", "gpt2", "--seq", "128", "--gpus", "4", "--parallelism-config", "./pc-ok.json",
                           "--every-n", "1", "--offload", "off", "-o", "hsdp2.json"), err, sizeof err), 0);
    char *b = cli_slurp("hsdp2.json");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(strstr(a, "\"dp_replicate\":\t2"));
    /* the same peak as the flags' plan (the plans differ in their inputs' wording only) */
    const char *pa = strstr(a, "\"peak_bytes\""), *pb = strstr(b, "\"peak_bytes\"");
    assert_non_null(pa);
    assert_non_null(pb);
    assert_int_equal(strncmp(pa, pb, 40), 0);
    free(a);
    free(b);
    /* tensor parallelism alone: one TP rank planned; the snippet loads the model with transformers'
     * DistributedConfig and gives TrainingArguments accelerate's ParallelismConfig(tp_size) (FINDINGS R-TP-1) */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--seq", "128", "--gpus", "2", "--tp", "2", "--every-n", "1",
                           "--offload", "off", "-o", "tp.json"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "distributed_config=DistributedConfig(tp_size=2))"));
    assert_non_null(strstr(cli_out, "from transformers.distributed import DistributedConfig"));
    assert_non_null(strstr(cli_out, "parallelism_config=ParallelismConfig(tp_size=2),"));
    assert_non_null(strstr(cli_out, "torchrun --nproc_per_node 2"));
    assert_non_null(strstr(cli_out, "tensor parallelism over 2 GPUs"));
    char *t = cli_slurp("tp.json");
    assert_non_null(t);
    assert_non_null(strstr(t, "\"tensor_parallel\""));
    assert_non_null(strstr(t, "\"tensor_parallel_collectives\""));
    free(t);
    /* TP x FSDP: transformers' DistributedConfig(tp_size, fsdp_size) applies FSDP2 itself; the Trainer gets
     * ParallelismConfig(dp_shard_size, tp_size); the flags and the file plan the same (FINDINGS R-TP-8) */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--seq", "128", "--gpus", "4", "--tp", "2", "--dp-shard", "2",
                           "--every-n", "1", "--offload", "off", "-o", "tpf.json"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "distributed_config=DistributedConfig(tp_size=2, fsdp_size=2))"));
    assert_non_null(strstr(cli_out, "parallelism_config=ParallelismConfig(dp_shard_size=2, tp_size=2),"));
    assert_non_null(strstr(cli_out, "torchrun --nproc_per_node 4"));
    assert_non_null(strstr(cli_out, "tensor parallelism 2 x FSDP 2 over 4 GPUs"));
    assert_non_null(strstr(cli_out, "[tp_fsdp_unverified]"));
    assert_null(strstr(cli_out, "fsdp_config"));
    char *tf = cli_slurp("tpf.json");
    assert_non_null(tf);
    assert_non_null(strstr(tf, "\"fsdp_size\":\t2"));
    assert_non_null(strstr(tf, "\"world_size\":\t4"));
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--seq", "128", "--gpus", "4", "--parallelism-config",
                           "./pc-tp.json", "--every-n", "1", "--offload", "off", "-o", "tpf2.json"), err, sizeof err), 0);
    char *tf2 = cli_slurp("tpf2.json");
    assert_non_null(tf2);
    /* TP x DDP: DistributedConfig(tp_size, dp_replicate_size); the Trainer gives accelerate ParallelismConfig(tp_size,
     * dp_shard_size = the replicas) (FINDINGS R-TP-11) */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--seq", "128", "--gpus", "4", "--tp", "2", "--dp-replicate", "2",
                           "--every-n", "1", "--offload", "off", "-o", "tpd.json"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "distributed_config=DistributedConfig(tp_size=2, dp_replicate_size=2))"));
    assert_non_null(strstr(cli_out, "parallelism_config=ParallelismConfig(dp_shard_size=2, tp_size=2),"));
    assert_non_null(strstr(cli_out, "torchrun --nproc_per_node 4"));
    assert_non_null(strstr(cli_out, "tensor parallelism 2 x DDP 2 over 4 GPUs"));
    assert_non_null(strstr(cli_out, "[tp_fsdp_unverified]"));
    char *td = cli_slurp("tpd.json");
    assert_non_null(td);
    assert_non_null(strstr(td, "\"dp_replicate_size\":\t2"));
    assert_non_null(strstr(td, "\"world_size\":\t4"));
    free(td);
    /* HSDP x TP: DistributedConfig(tp_size, fsdp_size, dp_replicate_size); accelerate gets dp_shard_size = R x S */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--seq", "128", "--gpus", "8", "--tp", "2", "--dp-replicate", "2",
                           "--dp-shard", "2", "--every-n", "1", "--offload", "off"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "distributed_config=DistributedConfig(tp_size=2, fsdp_size=2, dp_replicate_size=2))"));
    assert_non_null(strstr(cli_out, "parallelism_config=ParallelismConfig(dp_shard_size=4, tp_size=2),"));
    assert_non_null(strstr(cli_out, "tensor parallelism 2 x HSDP 2 x 2 over 8 GPUs"));
    const char *p1 = strstr(tf, "\"peak_bytes\""), *p2 = strstr(tf2, "\"peak_bytes\"");
    assert_non_null(p1);
    assert_non_null(p2);
    assert_int_equal(strncmp(p1, p2, 40), 0);
    free(tf);
    free(tf2);
}

/* LoRA / QLoRA plans: the method's inputs recorded, trainable_params per entry, QLoRA's
 * breakdown components, the snippet that builds what was planned, and a full fine-tuning
 * run that fits nowhere saying what LoRA and QLoRA would need. */
static void lora_runs(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "512", "--method", "qlora", "--lora-rank", "8",
                           "--lora-targets", "q_proj,v_proj", "--modules-to-save", "lm_head", "--every-n", "off,2",
                           "-o", "qlora.json"), err, sizeof err), 0);
    char *j = cli_slurp("qlora.json");
    assert_non_null(j);
    assert_non_null(strstr(j, "\"method\":\t\"qlora\""));
    assert_non_null(strstr(j, "\"targets\":\t\"q_proj,v_proj\""));
    assert_non_null(strstr(j, "\"trainable_params\":\t"));
    assert_non_null(strstr(j, "\"quantized_weights\":\t"));
    assert_non_null(strstr(j, "\"quant_stats\":\t"));
    free(j);
    assert_non_null(strstr(cli_out, "bnb_4bit_quant_type=\"nf4\", bnb_4bit_use_double_quant=True"));
    assert_non_null(strstr(cli_out, "prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)"));
    assert_non_null(strstr(cli_out, "LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules=[\"q_proj\", \"v_proj\"], modules_to_save=[\"lm_head\"]"));
    /* several GPUs (FINDINGS R-DISTPEFT): the QLoRA + FSDP2 recipe's bf16 storage, its words in the snippet */
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "512", "--method", "qlora", "--quant-storage", "bf16",
                           "--gpus", "2", "--parallel", "fsdp", "-o", "qlora-fsdp.json"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "bnb_4bit_quant_storage=torch.bfloat16)"));
    assert_non_null(strstr(cli_out, "# bnb_4bit_quant_storage=torch.bfloat16: fully_shard shards the 4-bit weights"));
    assert_non_null(strstr(cli_out, "use_orig_params is obsolete"));
    j = cli_slurp("qlora-fsdp.json");
    assert_non_null(j);
    assert_non_null(strstr(j, "\"storage\":\t\"bf16\""));
    free(j);
    /* LoRA under TP (FINDINGS R-TP-12, R-TP-15): colwise adapters on the tp_plan's model, every_n off planned
     * too; the snippet loads the shard, then get_peft_model */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--seq", "512", "--method", "lora", "--lora-targets",
                           "q_proj,v_proj", "--gpus", "2", "--tp", "2", "--every-n", "off,1,4", "-o", "lora-tp.json"), err,
                         sizeof err), 0);
    const char *tpl = strstr(cli_out, "distributed_config=DistributedConfig(tp_size=2))\n");
    assert_non_null(tpl);
    assert_non_null(strstr(tpl, "model = get_peft_model(model, lora)"));
    assert_non_null(strstr(cli_out, "parallelism_config=ParallelismConfig(tp_size=2)"));
    assert_non_null(strstr(cli_out, "# launch: torchrun --nproc_per_node 2 train.py"));
    j = cli_slurp("lora-tp.json");
    assert_non_null(j);
    assert_non_null(strstr(j, "\"tp_size\":\t2"));
    assert_non_null(strstr(j, "\"every_n_layers\":\t0")); /* every_n off: planned (R-TP-15) */
    free(j);
    assert_int_equal(run(A("--model", "llama-3.2-1b", "--seq", "512", "--method", "lora", "--gpus", "2", "--parallel",
                           "ddp"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "# DDP: the Trainer passes find_unused_parameters=True for a PeftModel"));
    assert_int_equal(run(A("--model", "gpt2", "--seq", "256", "--method", "lora", "--lora-targets", "c_attn,c_proj",
                           "--lora-alpha", "8", "--lora-dropout", "0"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "lora r 16 alpha 8 dropout 0 c_attn,c_proj"));
    assert_non_null(strstr(cli_out, "target_modules=[\"c_attn\", \"c_proj\"]"));
    /* issue 13's families: their own module names (Phi-3's fused projections, GPT-NeoX's) */
    assert_int_equal(run(A("--model", "phi-3-mini-4k", "--seq", "512", "--method", "lora", "--lora-targets",
                           "qkv_proj,o_proj"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "target_modules=[\"o_proj\", \"qkv_proj\"]"));
    assert_int_equal(run(A("--model", "pythia-1.4b", "--seq", "512", "--method", "qlora", "--modules-to-save",
                           "embed_in"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "target_modules=\"all-linear\", modules_to_save=[\"embed_in\"]"));
    /* the MoE families: attention adapters, printed by name where all-linear would wrap
     * the experts (mixtral), as all-linear where it is exactly those (gpt_oss) */
    assert_int_equal(run(A("--model", "mixtral-8x7b", "--seq", "512", "--method", "lora", "--lora-targets",
                           "q_proj,k_proj,v_proj,o_proj", "--every-n", "off,1", "--gpu", "h200", "--precision", "bf16", "-o",
                           "moe.json"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "target_modules=[\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"]"));
    assert_non_null(strstr(cli_out, ", 13631488 trainable"));
    j = cli_slurp("moe.json");
    assert_non_null(j);
    assert_non_null(strstr(j, "\"targets\":\t\"q_proj,k_proj,v_proj,o_proj\""));
    free(j);
    assert_int_equal(run(A("--model", "gpt-oss-20b", "--seq", "512", "--method", "lora", "--every-n", "off,1", "--gpu", "h200"), err,
                         sizeof err), 0);
    assert_non_null(strstr(cli_out, "target_modules=\"all-linear\""));
    assert_non_null(strstr(cli_out, ", 7962624 trainable"));
    /* QLoRA there: bitsandbytes quantizes q/k/v/o, the experts stay (fp32 after prepare) */
    assert_int_equal(run(A("--model", "qwen3-30b-a3b", "--seq", "512", "--method", "qlora", "--lora-targets",
                           "q_proj,k_proj,v_proj,o_proj", "--every-n", "off,1", "--gpu", "h200"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "qlora r 16 alpha 32 dropout 0.05 q_proj,k_proj,v_proj,o_proj, 13369344 trainable"));
    assert_non_null(strstr(cli_out, "prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)"));
    /* full fine-tuning of an 8B model on 24 GB: nothing fits; LoRA and QLoRA lines */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--every-n", "off,1"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "Nothing fits"));
    assert_non_null(strstr(cli_out, "--method lora  --precision bf16"));
    assert_non_null(strstr(cli_out, "--method qlora --precision amp-bf16"));
    assert_non_null(strstr(cli_out, "(r 16, all-linear)"));
    /* a mixture of experts, where all-linear is refused: the attention adapters instead */
    assert_int_equal(run(A("--model", "mixtral-8x7b", "--gpu", "h100-sxm-80gb", "--every-n", "1"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "--method lora  --precision bf16     (r 16, q/k/v/o)"));
    assert_non_null(strstr(cli_out, "--method qlora --precision amp-bf16 (r 16, q/k/v/o)"));
    assert_null(strstr(cli_out, "all-linear)"));
    /* a bf16 LoRA request that fits nowhere: each alternative once (bf16 + adamw-8bit
     * is both "8-bit instead" and "bf16 with 8-bit") */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--seq", "16384", "--method", "lora",
                           "--precision", "bf16", "--every-n", "1"), err, sizeof err), 0);
    const char *first = strstr(cli_out, "--optimizer adamw-8bit");
    assert_non_null(first);
    assert_null(strstr(first + 1, "--optimizer adamw-8bit"));
    /* several GPUs, nothing fits with ddp: the other modes on the same GPUs */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--gpus", "8", "--parallel", "ddp", "--every-n", "1"), err,
                         sizeof err), 0);
    assert_non_null(strstr(cli_out, "Nothing fits"));
    assert_non_null(strstr(cli_out, "--parallel zero3"));
    assert_non_null(strstr(cli_out, "--parallel fsdp"));
    assert_null(strstr(cli_out, "--parallel ddp  "));
    /* paged optimizers: the states in managed memory reported apart, the TrainingArguments name */
    assert_int_equal(run(A("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--method", "qlora", "--optimizer",
                           "paged_adamw_8bit", "--every-n", "1", "--offload", "off"), err, sizeof err), 0);
    assert_non_null(strstr(cli_out, "paged_optimizer_states: 0.04 GiB in CUDA managed memory"));
    assert_non_null(strstr(cli_out, "optim=\"paged_adamw_8bit\""));
}

int main(void)
{
    if (!cli_setup("gckpt-cli")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_inputs),
        cmocka_unit_test(existing_output_untouched),
        cmocka_unit_test(good_runs),
        cmocka_unit_test(lora_runs),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cli_teardown();
    return rc;
}
