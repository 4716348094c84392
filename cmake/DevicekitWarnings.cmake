# Warnings are errors in our own builds (never imposed on users of the package).
#   devicekit_configure_target(<target>)  - warnings, sanitizers, and the devicekit link.
set(DEVICEKIT_CXX_WARNINGS -Wall -Wextra -Werror -Wshadow=local)
set(DEVICEKIT_CUDA_WARNINGS -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror)

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
