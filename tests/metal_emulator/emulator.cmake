# The Metal emulator test build (cmake -DMUSER_METAL_EMULATOR=ON with clang),
# included by the top-level CMakeLists.txt after muser_engine is defined.
# Makes two programs for tests/backend/test_metal_*.py:
#   metal_op_runner      one op of ops_encode.cpp on the emulator
#   metal_engine_runner  the whole engine with backend "metal": the real
#                        Objective-C++ host (csrc/backend/metal/*.mm) over the
#                        fake Metal framework (fake_metal/) over the emulator
# Everything is built with AddressSanitizer and UndefinedBehaviorSanitizer
# (CMAKE_CXX_FLAGS from the harness) and the Objective-C parts with GCC's
# Objective-C runtime (clang -fobjc-runtime=gcc, libobjc).
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "MUSER_METAL_EMULATOR needs clang (kernels use _Float16 and ext_vector_type)")
endif()
set(EMU "${CMAKE_CURRENT_SOURCE_DIR}/tests/metal_emulator")

# GCC's runtime headers live in GCC's private include directory, beside
# intrinsics headers clang must not see: expose only objc/.
execute_process(COMMAND gcc -print-file-name=include OUTPUT_VARIABLE MUSER_GCC_INCLUDE
                OUTPUT_STRIP_TRAILING_WHITESPACE)
set(MUSER_OBJC_INCLUDE "${CMAKE_CURRENT_BINARY_DIR}/objc_include")
file(MAKE_DIRECTORY "${MUSER_OBJC_INCLUDE}")
file(CREATE_LINK "${MUSER_GCC_INCLUDE}/objc" "${MUSER_OBJC_INCLUDE}/objc" SYMBOLIC)
find_library(MUSER_LIBOBJC NAMES objc libobjc.so.4 REQUIRED)

set(MUSER_OBJC_FLAGS -fobjc-runtime=gcc -fno-objc-arc)
target_compile_options(muser_engine PRIVATE $<$<COMPILE_LANGUAGE:OBJCXX>:${MUSER_OBJC_FLAGS}>)
target_include_directories(muser_engine SYSTEM PRIVATE "${MUSER_OBJC_INCLUDE}")
target_include_directories(muser_engine PRIVATE "${EMU}/fake_metal")

# Kernels: each metal/*.metal becomes a C++ translation unit with thunks.
file(GLOB MUSER_EMU_KERNELS CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/metal/*.metal")
list(APPEND MUSER_EMU_KERNELS "${EMU}/selftest_kernels.metal")
set(MUSER_EMU_KERNEL_TUS "")
foreach(metal IN LISTS MUSER_EMU_KERNELS)
  get_filename_component(stem "${metal}" NAME_WE)
  set(tu "${CMAKE_CURRENT_BINARY_DIR}/kernels_${stem}.cpp")
  add_custom_command(
    OUTPUT "${tu}"
    COMMAND "${Python_EXECUTABLE}" "${EMU}/gen_kernel_thunks.py" "${metal}" "${tu}"
    DEPENDS "${metal}" "${EMU}/gen_kernel_thunks.py"
    COMMENT "Emulator thunks for ${stem}.metal")
  list(APPEND MUSER_EMU_KERNEL_TUS "${tu}")
endforeach()
add_library(muser_metal_emulator OBJECT
  "${EMU}/emulator.cpp" "${EMU}/emulator_encoder.cpp" ${MUSER_EMU_KERNEL_TUS})
target_include_directories(muser_metal_emulator PRIVATE
  "${EMU}" "${EMU}/include" "${CMAKE_CURRENT_SOURCE_DIR}/csrc" "${CMAKE_CURRENT_SOURCE_DIR}/metal")
# Apple's compiler predefines __METAL_VERSION__ (shared headers key on it);
# the emulator's own files ignore it.
target_compile_definitions(muser_metal_emulator PRIVATE __METAL_VERSION__=300)
target_compile_options(muser_metal_emulator PRIVATE -ffp-contract=off -Wall -Wextra -Wno-unused-parameter)

add_library(muser_fake_metal OBJECT "${EMU}/fake_metal/fake_metal.mm")
target_include_directories(muser_fake_metal PRIVATE "${EMU}/fake_metal" "${EMU}")
target_include_directories(muser_fake_metal SYSTEM PRIVATE "${MUSER_OBJC_INCLUDE}")
target_compile_options(muser_fake_metal PRIVATE ${MUSER_OBJC_FLAGS})

add_executable(metal_op_runner "${EMU}/op_runner.cpp"
  "${CMAKE_CURRENT_SOURCE_DIR}/csrc/backend/metal/ops_encode.cpp"
  "${CMAKE_CURRENT_SOURCE_DIR}/csrc/core/error.cpp" "${CMAKE_CURRENT_SOURCE_DIR}/csrc/tensor/dtype.cpp"
  $<TARGET_OBJECTS:muser_metal_emulator>)
target_include_directories(metal_op_runner PRIVATE "${EMU}" "${CMAKE_CURRENT_SOURCE_DIR}/csrc")

add_executable(metal_engine_runner "${EMU}/engine_runner.cpp"
  $<TARGET_OBJECTS:muser_engine> $<TARGET_OBJECTS:muser_metal_emulator> $<TARGET_OBJECTS:muser_fake_metal>)
target_include_directories(metal_engine_runner PRIVATE "${EMU}" "${CMAKE_CURRENT_SOURCE_DIR}/csrc")
target_link_libraries(metal_engine_runner PRIVATE Threads::Threads "${MUSER_LIBOBJC}")
