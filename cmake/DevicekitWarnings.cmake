# Warnings for our own targets (never imposed on users of the package); errors only with
# DEVICEKIT_WERROR=ON, which CI sets (scripts/test).
#   devicekit_configure_target(<target>)  - warnings, sanitizers, and the devicekit link.
# DEVICEKIT_CXX_WARNINGS is also used by sim/ and tests/ for targets that do not link devicekit.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  # clang has no -Wshadow=local (an unknown warning option, an error under -Werror); its -Wshadow
  # covers a local that hides a local or a parameter too, and the headers compile clean under it.
  set(DEVICEKIT_CXX_WARNINGS -Wall -Wextra -Wshadow)
else()
  set(DEVICEKIT_CXX_WARNINGS -Wall -Wextra -Wshadow=local)
endif()
set(DEVICEKIT_CUDA_WARNINGS -Xcompiler=-Wall,-Wextra)
if(DEVICEKIT_WERROR)
  list(APPEND DEVICEKIT_CXX_WARNINGS -Werror)
  # nvcc: -Werror=all-warnings makes nvcc's own (front-end) warnings errors, -Xcompiler=-Werror
  # the host compiler's (nvcc manual, "--Werror" and "--compiler-options").
  set(DEVICEKIT_CUDA_WARNINGS -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror)
endif()

set(DEVICEKIT_SANITIZER_FLAGS "")
if(DEVICEKIT_SANITIZE)
  set(DEVICEKIT_SANITIZER_FLAGS -fsanitize=${DEVICEKIT_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
endif()

function(devicekit_configure_target target)
  target_link_libraries(${target} PRIVATE devicekit::devicekit)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${DEVICEKIT_CXX_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:${DEVICEKIT_CUDA_WARNINGS}>)
  if(DEVICEKIT_SANITIZER_FLAGS)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DEVICEKIT_SANITIZER_FLAGS}>)
    target_link_options(${target} PRIVATE ${DEVICEKIT_SANITIZER_FLAGS})
  endif()
endfunction()
