/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Empty programs on the hooks magnet's network probes use.  Their
 * run_time_ns / run_cnt (kernel.bpf_stats_enabled=1) is the fixed cost of
 * the hook itself (dispatch, bpf_stats accounting, context set-up), so
 * "magnet program ns/event - empty program ns/event" is what magnet's
 * probe bodies add.  Loaded and attached by empty_probes.cc.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("tp_btf/sock_send_length")
int empty_sock_send(void *ctx) { return 0; }

SEC("tp_btf/sock_recv_length")
int empty_sock_recv(void *ctx) { return 0; }

SEC("tp_btf/net_dev_queue")
int empty_dev_xmit(void *ctx) { return 0; }

SEC("tp_btf/netif_receive_skb")
int empty_dev_recv(void *ctx) { return 0; }

SEC("cgroup_skb/egress")
int empty_ip_send(struct __sk_buff *skb) { return 1; }

SEC("cgroup_skb/ingress")
int empty_l4_recv(struct __sk_buff *skb) { return 1; }

/* NF_ACCEPT */
SEC("netfilter")
int empty_l4_send(void *ctx) { return 1; }

SEC("netfilter")
int empty_ip_recv(void *ctx) { return 1; }

char LICENSE[] SEC("license") = "GPL";
