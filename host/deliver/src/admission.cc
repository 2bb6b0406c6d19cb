#include "magnet/deliver/admission.h"

#include <linux/vm_sockets.h>

namespace magnet::host {

std::string_view refusal_name(refusal r) {
  switch (r) {
    case refusal::none: return "none";
    case refusal::not_guest: return "not_guest";
    case refusal::unknown_cid: return "unknown_cid";
    case refusal::shared_cid: return "shared_cid";
    case refusal::port: return "port";
    case refusal::rate: return "rate";
    case refusal::busy: return "busy";
    case refusal::changed: return "changed";
    case refusal::unconfirmed: return "unconfirmed";
    case refusal::moved: return "moved";
    case refusal::qemu_gone: return "qemu_gone";
    case refusal::full: return "full";
  }
  return "?";
}

uint64_t accept_counts::refused_total() const {
  uint64_t n = 0;
  for (uint64_t r : refused) n += r;
  return n;
}

verdict vsock_admission::screen(vsock_peer p, std::span<const known_vm> vms,
                                view::steady::time_point now) {
  const std::string cid = std::to_string(p.cid);
  // 0 hypervisor, 1 local loopback, 2 this host: never a guest.
  if (p.cid <= VMADDR_CID_HOST || p.cid == VMADDR_CID_ANY)
    return {refusal::not_guest, 0, "CID " + cid + " is not a guest's"};
  uint32_t vm = 0;
  int n = 0;
  for (const auto& v : vms)
    if (v.cid == p.cid) vm = v.vm_id, ++n;
  if (n == 0) return {refusal::unknown_cid, 0, "no running domain has this CID"};
  if (n > 1) return {refusal::shared_cid, 0, "CID claimed by several domains"};
  if (!lim_.any_port && p.port >= kFirstUnprivilegedPort)
    return {refusal::port, vm,
            "source port " + std::to_string(p.port) +
                " is not below 1024: only the guest's root may connect (the agent binds a "
                "privileged port; the host runs without --vsock-any-port)"};
  auto b = buckets_.find(vm);
  if (b == buckets_.end())
    b = buckets_.emplace(vm, view::token_bucket(lim_.accepts_per_s, lim_.accept_burst, now)).first;
  if (!b->second.take_at(now))
    return {refusal::rate, vm,
            "more than " + std::to_string(static_cast<unsigned>(lim_.accepts_per_s)) +
                " connections per second from this VM"};
  return {refusal::none, vm, {}};
}

verdict vsock_admission::confirm(vsock_peer p, uint32_t vm, const result<uint32_t>& owner) {
  const std::string cid = "CID " + std::to_string(p.cid);
  if (!owner) return {refusal::unconfirmed, vm, cid + " could not be confirmed: " + owner.err().message};
  // Another VM's name is not the peer's business: the text says only
  // that the CID is not its VM's.
  if (owner.value() != vm)
    return {refusal::moved, vm,
            cid + (owner.value() ? " belongs to another VM now" : " belongs to no running VM now")};
  return {refusal::none, vm, {}};
}

placement vsock_admission::place(std::span<const open_conn> open) const {
  if (open.size() < lim_.max_conns_per_vm) return {};
  // The oldest that has not subscribed makes room: a slot held without a
  // subscription (the subscribe deadline closes it anyway) never keeps
  // the agent out.
  std::optional<size_t> oldest;
  for (size_t i = 0; i < open.size(); ++i)
    if (!open[i].subscribed && (!oldest || open[i].opened < open[*oldest].opened)) oldest = i;
  const std::string cap = std::to_string(lim_.max_conns_per_vm);
  if (oldest) return {refusal::none, oldest, "replaced by a newer connection of this VM (at most " + cap +
                                                 "; this one had not subscribed)"};
  return {refusal::full, std::nullopt,
          "more than " + cap + " connections, all of them subscribed"};
}

void vsock_admission::count(uint32_t vm, refusal r) {
  counts_[vm].refused[static_cast<size_t>(r)]++;
}

void vsock_admission::count_accepted(uint32_t vm, bool replaced) {
  auto& c = counts_[vm];
  ++c.accepted;
  c.replaced += replaced;
}

void vsock_admission::keep_only(const std::set<uint32_t>& vms) {
  std::erase_if(buckets_, [&](const auto& b) { return !vms.count(b.first); });
}

}  // namespace magnet::host
