/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * libbpf's usdt.bpf.h includes <linux/errno.h> -> <asm/errno.h>, an
 * arch-specific header that is not on the BPF include path (BPF objects see
 * vmlinux.h, not the multiarch /usr/include/<triplet>).  It uses three
 * codes; these are the values of asm-generic/errno-base.h, the same on
 * every architecture magnet builds for.
 */
#ifndef MAGNET_BPF_ASM_ERRNO_H
#define MAGNET_BPF_ASM_ERRNO_H
#define ENOENT 2
#define ESRCH 3
#define EINVAL 22
#endif
