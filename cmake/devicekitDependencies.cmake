# devicekit's third-party dependencies as imported targets, found the same way by devicekit's own
# build (CMakeLists.txt) and by the installed package (devicekitConfig.cmake, at the consumer's
# configure time). The exported targets link these names, never a path from the machine that
# built the package, so an install works with a toolkit, NCCL or Boost somewhere else
# (CUDAToolkit_ROOT, NCCL_HOME, CMAKE_PREFIX_PATH).
#
#   devicekit_find_hana()   devicekit_deps::hana: Boost.Hana's headers (optional: devicekit
#                           includes its Hana adaptor only when <boost/hana/...> is found).
#   devicekit_find_cccl([hint...])  after find_package(CUDAToolkit) where there is a toolkit:
#                           devicekit_deps::cccl, the toolkit's CCCL directory (include/cccl
#                           since CUDA 13; nvcc searches it by itself, a host compiler does not),
#                           empty for a toolkit that keeps CCCL in include/. Sets
#                           DEVICEKIT_TOOLKIT_CCCL_DIR. Without a toolkit (or one with no
#                           include/cccl), CCCL's headers on their own: libcu++'s cuda::std::mdspan
#                           compiles with a plain host compiler, so shaped arrays work on a machine
#                           with no CUDA. Looked for under DEVICEKIT_CCCL_ROOT, then CCCL_ROOT
#                           (CMake variables or environment), then the hints (devicekit's own build
#                           passes .deps/cccl, where scripts/lib.sh unpacks PyPI's nvidia-cuda-cccl
#                           wheel), as <root>/include/cccl or <root>/include (cache:
#                           DEVICEKIT_CCCL_STANDALONE_DIR). CCCL holds no cuda_runtime_api.h, so it
#                           never makes devicekit think the CUDA runtime is there.
#   devicekit_find_nccl()   after find_package(CUDAToolkit), looking in NCCL_HOME, then the toolkit
#                           and the usual places, then python3's nvidia-nccl-cu13 wheel (cache:
#                           DEVICEKIT_NCCL_INCLUDE_DIR, DEVICEKIT_NCCL_LIBRARY):
#     devicekit_deps::nccl_headers  nccl.h (empty when not found)
#     devicekit_deps::nccl          libnccl with its headers; only when both are found.
#   devicekit_find_rmm()    for devicekit::rmm (devicekit/rmm/resource.hpp), after
#                           find_package(CUDAToolkit): RMM's own CMake package where this CMake can
#                           load it (RMM 26 asks for CMake 3.30.4), else RMM's files under RMM_ROOT
#                           (CMake variable or environment: a prefix, or the librmm directory of
#                           the librmm-cu13 wheel), else python3's librmm-cu13 wheel; rapids_logger
#                           beside it, under RAPIDS_LOGGER_ROOT or python3's rapids-logger wheel
#                           (cache: DEVICEKIT_RMM_INCLUDE_DIR, DEVICEKIT_RMM_LIBRARY,
#                           DEVICEKIT_RAPIDS_LOGGER_INCLUDE_DIR, DEVICEKIT_RAPIDS_LOGGER_LIBRARY):
#     devicekit_deps::rmm           RMM, with the CCCL it ships ahead of the toolkit's on the include
#                                   path (RMM is written for it); only when found.
include_guard(GLOBAL)

function(devicekit_find_hana)
  find_path(DEVICEKIT_HANA_INCLUDE_DIR boost/hana.hpp DOC "Boost.Hana's include directory (optional)")
  if(NOT TARGET devicekit_deps::hana)
    add_library(devicekit_deps::hana INTERFACE IMPORTED)
    if(DEVICEKIT_HANA_INCLUDE_DIR)
      set_target_properties(devicekit_deps::hana PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${DEVICEKIT_HANA_INCLUDE_DIR}")
    endif()
  endif()
endfunction()

function(devicekit_find_cccl)
  set(cccl_dir "")
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    if(EXISTS "${dir}/cccl/cuda/std/mdspan")
      set(cccl_dir "${dir}/cccl")
      break()
    endif()
  endforeach()
  set(DEVICEKIT_TOOLKIT_CCCL_DIR "${cccl_dir}" PARENT_SCOPE)
  if(NOT cccl_dir AND NOT CUDAToolkit_FOUND)
    # Only the given roots are searched (NO_DEFAULT_PATH): a toolkit that the build set aside
    # (DEVICEKIT_ENABLE_CUDA=OFF, CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit) must not come back
    # through a system prefix that links to its include/cccl.
    find_path(DEVICEKIT_CCCL_STANDALONE_DIR cuda/std/mdspan
              HINTS ${DEVICEKIT_CCCL_ROOT} ENV DEVICEKIT_CCCL_ROOT ${CCCL_ROOT} ENV CCCL_ROOT ${ARGN}
              PATH_SUFFIXES include/cccl include NO_DEFAULT_PATH
              DOC "CCCL's include directory (cuda/std/mdspan) where there is no CUDA toolkit")
    if(DEVICEKIT_CCCL_STANDALONE_DIR)
      set(cccl_dir "${DEVICEKIT_CCCL_STANDALONE_DIR}")
    endif()
  endif()
  if(NOT TARGET devicekit_deps::cccl)
    add_library(devicekit_deps::cccl INTERFACE IMPORTED)
    if(cccl_dir)
      set_target_properties(devicekit_deps::cccl PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${cccl_dir}")
    endif()
  endif()
endfunction()

# NCCL is found, in this order, in:
#   1. NCCL_HOME (CMake variable or environment variable) alone, so that an explicit choice wins
#      over the toolkit's copy; NCCL_HOME may be a prefix (include/, lib/) or the nvidia/nccl
#      directory of the nvidia-nccl-cu13 wheel, which has the same layout;
#   2. the CUDA toolkit, then CMAKE_PREFIX_PATH and the system paths (find_path/find_library's
#      usual search);
#   3. the nvidia-nccl-cu13 wheel of the python3 on PATH, if it has one.
# The wheel ships libnccl.so.2 and no libnccl.so link, which find_library(nccl) would need: the
# full name is listed too (find_library's NAMES are tried as file names first, then with the
# platform's prefix and suffix; CMake documentation, find_library).
function(devicekit_find_nccl)
  get_filename_component(toolkit_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
  set(names nccl libnccl.so.2)
  set(home "${NCCL_HOME}")
  if(NOT home AND DEFINED ENV{NCCL_HOME})
    set(home "$ENV{NCCL_HOME}")
  endif()
  if(home)
    find_path(DEVICEKIT_NCCL_INCLUDE_DIR nccl.h PATHS "${home}" PATH_SUFFIXES include NO_DEFAULT_PATH
              DOC "NCCL's include directory")
    find_library(DEVICEKIT_NCCL_LIBRARY NAMES ${names} PATHS "${home}" PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH
                 DOC "libnccl")
    if(NOT DEVICEKIT_NCCL_INCLUDE_DIR OR NOT DEVICEKIT_NCCL_LIBRARY)
      message(STATUS "devicekit: NCCL_HOME=${home} has no include/nccl.h or lib/libnccl; looking elsewhere")
    endif()
  endif()
  # (A find_* call whose cache variable is already set searches nothing.)
  find_path(DEVICEKIT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include
            DOC "NCCL's include directory")
  find_library(DEVICEKIT_NCCL_LIBRARY NAMES ${names} HINTS ${CUDAToolkit_LIBRARY_DIR} "${toolkit_root}"
               PATH_SUFFIXES lib lib64 DOC "libnccl")
  if(NOT DEVICEKIT_NCCL_INCLUDE_DIR OR NOT DEVICEKIT_NCCL_LIBRARY)
    # nvidia.nccl is a namespace package (no __init__.py): its directory is in __path__.
    find_program(python3 NAMES python3 NO_CACHE)
    if(python3)
      execute_process(COMMAND "${python3}" -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
                      OUTPUT_VARIABLE wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
      if(rc EQUAL 0 AND IS_DIRECTORY "${wheel}")
        find_path(DEVICEKIT_NCCL_INCLUDE_DIR nccl.h PATHS "${wheel}/include" NO_DEFAULT_PATH
                  DOC "NCCL's include directory")
        find_library(DEVICEKIT_NCCL_LIBRARY NAMES ${names} PATHS "${wheel}/lib" NO_DEFAULT_PATH DOC "libnccl")
      endif()
    endif()
  endif()
  if(NOT TARGET devicekit_deps::nccl_headers)
    add_library(devicekit_deps::nccl_headers INTERFACE IMPORTED)
    if(DEVICEKIT_NCCL_INCLUDE_DIR)
      set_target_properties(devicekit_deps::nccl_headers PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${DEVICEKIT_NCCL_INCLUDE_DIR}")
    endif()
  endif()
  if(DEVICEKIT_NCCL_INCLUDE_DIR AND DEVICEKIT_NCCL_LIBRARY AND NOT TARGET devicekit_deps::nccl)
    add_library(devicekit_deps::nccl UNKNOWN IMPORTED)
    set_target_properties(devicekit_deps::nccl PROPERTIES IMPORTED_LOCATION "${DEVICEKIT_NCCL_LIBRARY}"
                                                          INTERFACE_LINK_LIBRARIES devicekit_deps::nccl_headers)
  endif()
endfunction()

# The directory of python3's package `module` (a wheel's), in `out`; empty without one.
function(devicekit_python_package_dir module out)
  set(${out} "" PARENT_SCOPE)
  find_program(python3 NAMES python3 NO_CACHE)
  if(NOT python3)
    return()
  endif()
  execute_process(COMMAND "${python3}" -c "import ${module}, os; print(os.path.dirname(${module}.__file__))"
                  OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND IS_DIRECTORY "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  endif()
endfunction()

function(devicekit_find_rmm)
  if(TARGET devicekit_deps::rmm)
    return()
  endif()
  set(rmm_root "${RMM_ROOT}")
  if(NOT rmm_root AND DEFINED ENV{RMM_ROOT})
    set(rmm_root "$ENV{RMM_ROOT}")
  endif()
  # RMM's package, unless RMM_ROOT names files to use: it brings RMM's own dependencies (CCCL,
  # rapids_logger, nvtx3) as targets.
  if(NOT rmm_root AND CMAKE_VERSION VERSION_GREATER_EQUAL 3.30.4)
    find_package(rmm CONFIG QUIET)
    if(TARGET rmm::rmm)
      add_library(devicekit_deps::rmm INTERFACE IMPORTED)
      set_target_properties(devicekit_deps::rmm PROPERTIES INTERFACE_LINK_LIBRARIES rmm::rmm)
      return()
    endif()
  endif()
  if(NOT rmm_root)
    devicekit_python_package_dir(librmm rmm_root)
  endif()
  set(logger_root "${RAPIDS_LOGGER_ROOT}")
  if(NOT logger_root AND DEFINED ENV{RAPIDS_LOGGER_ROOT})
    set(logger_root "$ENV{RAPIDS_LOGGER_ROOT}")
  endif()
  if(NOT logger_root AND rmm_root AND IS_DIRECTORY "${rmm_root}/../rapids_logger")
    set(logger_root "${rmm_root}/../rapids_logger")  # the two wheels unpacked side by side
  endif()
  if(NOT logger_root)
    devicekit_python_package_dir(rapids_logger logger_root)
  endif()
  if(rmm_root)
    find_path(DEVICEKIT_RMM_INCLUDE_DIR rmm/resource_ref.hpp PATHS "${rmm_root}" PATH_SUFFIXES include
              NO_DEFAULT_PATH DOC "RMM's include directory")
    find_library(DEVICEKIT_RMM_LIBRARY NAMES rmm PATHS "${rmm_root}" PATH_SUFFIXES lib64 lib NO_DEFAULT_PATH
                 DOC "librmm")
  endif()
  if(logger_root)
    find_path(DEVICEKIT_RAPIDS_LOGGER_INCLUDE_DIR rapids_logger/logger.hpp PATHS "${logger_root}"
              PATH_SUFFIXES include NO_DEFAULT_PATH DOC "rapids_logger's include directory")
    find_library(DEVICEKIT_RAPIDS_LOGGER_LIBRARY NAMES rapids_logger PATHS "${logger_root}"
                 PATH_SUFFIXES lib64 lib NO_DEFAULT_PATH DOC "librapids_logger")
  endif()
  if(NOT DEVICEKIT_RMM_INCLUDE_DIR OR NOT DEVICEKIT_RMM_LIBRARY OR NOT DEVICEKIT_RAPIDS_LOGGER_INCLUDE_DIR
     OR NOT DEVICEKIT_RAPIDS_LOGGER_LIBRARY)
    return()
  endif()
  set(includes "${DEVICEKIT_RMM_INCLUDE_DIR}" "${DEVICEKIT_RAPIDS_LOGGER_INCLUDE_DIR}")
  if(IS_DIRECTORY "${DEVICEKIT_RMM_INCLUDE_DIR}/rapids")
    list(PREPEND includes "${DEVICEKIT_RMM_INCLUDE_DIR}/rapids")  # the wheel's CCCL, first
  endif()
  # librmm needs librapids_logger and does not say where it is (the wheels load one another from
  # Python): the program links it whether or not it calls it (a linker that drops unused
  # libraries, as Debian's and Ubuntu's do by default, would leave it out), and both are imported
  # libraries, so that a consumer's build tree runs with both directories in its RPATH.
  add_library(devicekit_deps::rapids_logger UNKNOWN IMPORTED)
  set_target_properties(devicekit_deps::rapids_logger PROPERTIES IMPORTED_LOCATION "${DEVICEKIT_RAPIDS_LOGGER_LIBRARY}")
  add_library(devicekit_deps::rmm UNKNOWN IMPORTED)
  set_target_properties(devicekit_deps::rmm PROPERTIES
    IMPORTED_LOCATION "${DEVICEKIT_RMM_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${includes}"
    INTERFACE_LINK_LIBRARIES "-Wl,--push-state,--no-as-needed;devicekit_deps::rapids_logger;-Wl,--pop-state")
endfunction()
