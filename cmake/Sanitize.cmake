# MAGNET_SANITIZE: sanitizers for every C++ and C target of the tree, e.g.
#   -DMAGNET_SANITIZE=address,undefined   (tools/test's ASan+UBSan tier)
#   -DMAGNET_SANITIZE=thread              (tools/test's TSan tier)
# Only host code is instrumented: the BPF objects are built by custom
# commands (cmake/BpfObject.cmake, clang -target bpf) that take none of these
# flags.  Undefined behaviour stops the program (-fno-sanitize-recover), as an
# ASan report does, so a report fails its test.
set(MAGNET_SANITIZE "" CACHE STRING
    "sanitizers for all host targets: address,undefined | thread (empty: none)")
if(MAGNET_SANITIZE)
  string(REPLACE "," ";" _magnet_san "${MAGNET_SANITIZE}")
  foreach(s IN LISTS _magnet_san)
    if(NOT s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "MAGNET_SANITIZE: unknown sanitizer '${s}' (address, undefined, thread, leak)")
    endif()
  endforeach()
  if("thread" IN_LIST _magnet_san AND ("address" IN_LIST _magnet_san OR "leak" IN_LIST _magnet_san))
    message(FATAL_ERROR "MAGNET_SANITIZE: thread cannot be combined with address or leak")
  endif()
  add_compile_options(-fsanitize=${MAGNET_SANITIZE} -fno-omit-frame-pointer)
  if("undefined" IN_LIST _magnet_san)
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
  add_link_options(-fsanitize=${MAGNET_SANITIZE})
  message(STATUS "magnet: sanitizers ${MAGNET_SANITIZE}")
endif()
