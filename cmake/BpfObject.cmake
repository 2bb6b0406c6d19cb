# bpf_object(NAME SRC [HEADERS...])
#
# Compiles kmod/bpf/NAME.bpf.c with clang -target bpf (CO-RE, against the
# vendored vmlinux.h) and generates a libbpf skeleton NAME.skel.h with
# bpftool.  Creates an INTERFACE target NAME_skel that puts the skeleton on
# the include path, and NAME_bpf_obj (the .bpf.o path) for tests.
# Everything generated stays in the build tree.

find_program(BPF_CLANG NAMES clang-14 clang REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

set(MAGNET_VMLINUX_DIR "${PROJECT_SOURCE_DIR}/kmod/vmlinux/x86" CACHE PATH
    "Directory holding the vendored vmlinux.h used for CO-RE")

function(bpf_object NAME SRC)
  set(out_dir "${CMAKE_CURRENT_BINARY_DIR}/bpf")
  set(obj "${out_dir}/${NAME}.bpf.o")
  set(skel "${out_dir}/${NAME}.skel.h")
  get_filename_component(src_abs "${SRC}" ABSOLUTE)
  get_filename_component(src_dir "${src_abs}" DIRECTORY)
  set(deps ${ARGN})
  file(GLOB proto_headers "${PROJECT_SOURCE_DIR}/proto/magnet/*.h")
  file(GLOB bpf_headers "${src_dir}/*.bpf.h")

  add_custom_command(
    OUTPUT "${obj}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${out_dir}"
    COMMAND ${BPF_CLANG} -g -O2 -Wall -Werror -target bpf -D__TARGET_ARCH_x86
            -I "${MAGNET_VMLINUX_DIR}" -I "${PROJECT_SOURCE_DIR}/proto"
            -I "${src_dir}"
            -c "${src_abs}" -o "${obj}.tmp.o"
    # bpftool gen object strips DWARF and links the object (as libbpf-bootstrap)
    COMMAND ${BPFTOOL} gen object "${obj}" "${obj}.tmp.o"
    DEPENDS "${src_abs}" ${deps} ${proto_headers} ${bpf_headers}
    COMMENT "BPF ${NAME}.bpf.c"
    VERBATIM)

  add_custom_command(
    OUTPUT "${skel}"
    COMMAND ${BPFTOOL} gen skeleton "${obj}" name "${NAME}_bpf" > "${skel}"
    DEPENDS "${obj}"
    COMMENT "skeleton ${NAME}.skel.h"
    VERBATIM)

  add_custom_target(${NAME}_skel_gen DEPENDS "${skel}" "${obj}")
  add_library(${NAME}_skel INTERFACE)
  add_dependencies(${NAME}_skel ${NAME}_skel_gen)
  target_include_directories(${NAME}_skel INTERFACE "${out_dir}")
  target_link_libraries(${NAME}_skel INTERFACE PkgConfig::LIBBPF)
  set(${NAME}_BPF_OBJ "${obj}" PARENT_SCOPE)
  set_property(GLOBAL PROPERTY ${NAME}_BPF_OBJ "${obj}")
endfunction()
