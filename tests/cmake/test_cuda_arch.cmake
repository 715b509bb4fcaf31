# cmake -DSOURCE_DIR=... -P tests/cmake/test_cuda_arch.cmake
# The CUDA architecture decision of cmake/gckpt_cuda_arch.cmake, without a GPU.
include(${SOURCE_DIR}/cmake/gckpt_cuda_arch.cmake)

function(expect what got want)
  if(NOT "${got}" STREQUAL "${want}")
    message(FATAL_ERROR "${what}: got '${got}', want '${want}'")
  endif()
endfunction()

gckpt_default_cuda_archs("" a)
expect("no GPU visible" "${a}" "80-real;89-real;90")
gckpt_default_cuda_archs("No devices were found" a)
expect("nvidia-smi without a GPU" "${a}" "80-real;89-real;90")
gckpt_default_cuda_archs("GPU 0: NVIDIA H200 (UUID: GPU-0000)\n" a)
expect("a GPU visible" "${a}" "native")

# every shipped profile has an architecture in the table
file(GLOB profiles ${SOURCE_DIR}/devices/*.json)
foreach(p ${profiles})
  get_filename_component(name ${p} NAME_WE)
  set(found FALSE)
  foreach(pair ${GCKPT_PROFILE_CUDA_ARCH})
    if(pair MATCHES "^${name}=")
      set(found TRUE)
    endif()
  endforeach()
  if(NOT found)
    message(FATAL_ERROR "devices/${name}.json has no CUDA architecture in cmake/gckpt_cuda_arch.cmake")
  endif()
endforeach()
message(STATUS "CUDA architecture decision: ok")
