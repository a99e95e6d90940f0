// SPDX-License-Identifier: GPL-2.0
/*
 * The bytes the kernel copies between user memory and socket buffers, by thread.
 *
 * Built by crates/sendpath-host/build.rs with `clang -target bpf` (nothing else: no kernel
 * or libbpf headers, so a host with clang builds it) and loaded by sendpath-host's `copies`
 * module through aya. Each program adds to the entry of the current thread in COPIED, which
 * user space fills with the threads it watches: a thread with no entry is not counted.
 *
 *   copied_to_user       tracepoint skb:skb_copy_datagram_iovec: each copy of received data
 *                        into user memory (recv, read, the copy part of TCP_ZEROCOPY_RECEIVE)
 *   copied_from_user     fexit _copy_from_iter, _copy_from_iter_nocache: each copy from user
 *                        memory (the payload of send and sendmsg, and anything else the
 *                        thread copies in, such as a write to a file)
 *   copied_deferred      fentry skb_copy_ubufs: a zero-copy buffer the kernel copied after
 *                        the send (the COPIED flag of MSG_ZEROCOPY's notifications); counted
 *                        under key 0 whatever thread runs it, since it may run in softirq
 */

typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) __typeof__(val) *name

/* Helper numbers from include/uapi/linux/bpf.h. */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;

/* The layout sendpath-host reads: three counters, in bytes. */
struct copied {
	__u64 to_user;
	__u64 from_user;
	__u64 deferred;
};

struct {
	__uint(type, 1 /* BPF_MAP_TYPE_HASH */);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct copied);
} COPIED SEC(".maps");

static struct copied *this_thread(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	return bpf_map_lookup_elem(&COPIED, &tid);
}

/* /sys/kernel/tracing/events/skb/skb_copy_datagram_iovec/format */
struct skb_copy_datagram_iovec_args {
	__u64 common;
	const void *skbaddr;
	int len;
};

SEC("tracepoint/skb/skb_copy_datagram_iovec")
int copied_to_user(struct skb_copy_datagram_iovec_args *args)
{
	struct copied *c = this_thread();
	if (c && args->len > 0)
		__sync_fetch_and_add(&c->to_user, (__u64)args->len);
	return 0;
}

/* size_t _copy_from_iter(void *addr, size_t bytes, struct iov_iter *i): ctx[3] is the
 * return value, the bytes copied. */
static int add_from_user(__u64 *ctx)
{
	struct copied *c = this_thread();
	if (c)
		__sync_fetch_and_add(&c->from_user, ctx[3]);
	return 0;
}

SEC("fexit/_copy_from_iter")
int copied_from_user(__u64 *ctx)
{
	return add_from_user(ctx);
}

SEC("fexit/_copy_from_iter_nocache")
int copied_from_user_nocache(__u64 *ctx)
{
	return add_from_user(ctx);
}

/* Only the field read, relocated against the running kernel's BTF (CO-RE). */
struct sk_buff {
	unsigned int data_len;
} __attribute__((preserve_access_index));

SEC("fentry/skb_copy_ubufs")
int copied_deferred(__u64 *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	__u32 any = 0;
	struct copied *c = bpf_map_lookup_elem(&COPIED, &any);
	if (c)
		__sync_fetch_and_add(&c->deferred, (__u64)skb->data_len);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
