# CUDA architectures of the executor: one for every GPU that has a shipped profile in
# devices/, or `native` when a GPU is visible where the project is configured.
#
# The profile -> architecture table (compute capability without the dot):
#   A100 40/80 GB: 80 (sm_80, Ampere); L40S, RTX 4090: 89 (sm_89, Ada);
#   H100 SXM/PCIe, H200: 90 (sm_90, Hopper).
# tests/cmake/test_cuda_arch.cmake checks that every devices/*.json is in it.
set(GCKPT_PROFILE_CUDA_ARCH
  "a100-40gb=80" "a100-80gb=80" "l40s=89" "rtx-4090=89"
  "h100-pcie-80gb=90" "h100-sxm-80gb=90" "h200=90")

# The shipped profiles' architectures, lowest first: real code for each, and PTX for the
# highest so that newer GPUs can JIT-compile it (e.g. 80-real;89-real;90).
function(gckpt_profile_cuda_archs out)
  set(archs)
  foreach(pair ${GCKPT_PROFILE_CUDA_ARCH})
    string(REGEX REPLACE "^.*=" "" a "${pair}")
    list(APPEND archs ${a})
  endforeach()
  list(REMOVE_DUPLICATES archs)
  list(SORT archs COMPARE NATURAL)
  list(POP_BACK archs last)
  set(res)
  foreach(a ${archs})
    list(APPEND res "${a}-real")
  endforeach()
  list(APPEND res "${last}")
  set(${out} "${res}" PARENT_SCOPE)
endfunction()

# The decision: native when `nvidia-smi -L` lists a GPU (gpu_listing: its output, or ""
# when it failed or is absent), else every shipped profile's architecture.
function(gckpt_default_cuda_archs gpu_listing out)
  if(gpu_listing MATCHES "GPU [0-9]+:")
    set(${out} "native" PARENT_SCOPE)
  else()
    gckpt_profile_cuda_archs(res)
    set(${out} "${res}" PARENT_SCOPE)
  endif()
endfunction()

# What a GPU visible now says (nvidia-smi -L), "" without one.
function(gckpt_visible_gpus out)
  set(listing "")
  find_program(GCKPT_NVIDIA_SMI nvidia-smi)
  if(GCKPT_NVIDIA_SMI)
    execute_process(COMMAND ${GCKPT_NVIDIA_SMI} -L OUTPUT_VARIABLE listing RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 20)
    if(NOT rc EQUAL 0)
      set(listing "")
    endif()
  endif()
  set(${out} "${listing}" PARENT_SCOPE)
endfunction()
