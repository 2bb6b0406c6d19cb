#include "vm_follow.h"

#include "magnet/registry/kernel_tags.h"
#include "magnet/text.h"

namespace magnet::host {

vm_select parse_vm_select(cli::args& a) {
  vm_select s;
  for (const auto& v : a.values("--vm")) {
    for (auto& name : split(v)) {
      if (name.empty()) throw cli::usage_error("--vm: an empty name in '" + v + "'");
      s.names.push_back(std::move(name));
    }
  }
  auto uri = a.value("--uri");
  if (uri && uri->empty()) throw cli::usage_error("--uri: empty");
  if (uri) s.uri = *uri;
  else if (!s.names.empty()) s.uri = "qemu:///system";
  return s;
}

vm_follower::vm_follower(capture& cap, const std::string& uri) : cap_(cap), reg_(uri, *this) {}

vm_follower::~vm_follower() { reg_.stop(); }

result<std::unique_ptr<vm_follower>> vm_follower::start(capture& cap, const vm_select& s) {
  std::unique_ptr<vm_follower> f(new vm_follower(cap, s.uri));
  if (auto r = f->reg_.reconcile(); !r)
    return error{"--vm/--uri: cannot follow the VMs of " + s.uri + ": " + r.err().message};
  std::string running;
  const auto ids = f->ids();
  for (const auto& [name, id] : ids) running += (running.empty() ? "" : ", ") + name;
  for (const auto& name : s.names) {
    auto it = ids.find(name);
    if (it == ids.end())
      return error{"--vm " + name + ": no running domain of that name at " + s.uri + " (running: " +
                   (running.empty() ? "none" : running) + ")"};
    f->selected_.insert(it->second);
  }
  f->reg_.start();
  return f;
}

std::map<std::string, uint32_t> vm_follower::ids() const {
  std::lock_guard lk(mu_);
  return ids_;
}

std::string vm_follower::describe() const {
  std::string out;
  for (const auto& [name, id] : ids()) out += (out.empty() ? "" : ", ") + name + " = vm " + std::to_string(id);
  return out.empty() ? "no VM running" : out;
}

void vm_follower::vm_changed(const vm_info& vm) {
  tag_vm_in_kernel(cap_, vm);
  std::lock_guard lk(mu_);
  ids_[vm.name] = vm.vm_id;
}

void vm_follower::vm_gone(uint32_t vm_id) { (void)cap_.untag_vm(vm_id); }

}  // namespace magnet::host
