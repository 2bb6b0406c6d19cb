#include "magnet/fleet/libvirt.h"

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <future>
#include <mutex>

#include "magnet/registry/libvirt_ref.h"

namespace magnet::fleet {

namespace {

using host::conn_ref;
using host::domain_ref;
using host::libvirt_message;

// libvirt prints every error on stderr unless told otherwise; ours carry
// its message where it matters.
void init_libvirt() {
  static std::once_flag once;
  std::call_once(once, [] {
    virInitialize();
    virSetErrorFunc(nullptr, [](void*, virErrorPtr) {});
  });
}

bool last_error_is_no_domain() {
  virErrorPtr e = virGetLastError();
  return e && e->code == VIR_ERR_NO_DOMAIN;
}

domain_facts facts_of(virDomainPtr d) {
  domain_facts f;
  f.name = virDomainGetName(d) ? virDomainGetName(d) : "";
  char uuid[VIR_UUID_STRING_BUFLEN] = {};
  if (virDomainGetUUIDString(d, uuid) == 0) f.uuid = uuid;
  virDomainInfo info{};
  if (virDomainGetInfo(d, &info) == 0) {
    f.vcpus = info.nrVirtCpu;
    f.mem_bytes = static_cast<double>(info.memory) * 1024;  // KiB
    f.running = info.state == VIR_DOMAIN_RUNNING;
  }
  f.persistent = virDomainIsPersistent(d) == 1;
  return f;
}

}  // namespace

result<host_facts> read_host_facts(const std::string& uri) {
  init_libvirt();
  conn_ref c(virConnectOpenReadOnly(uri.c_str()));
  if (!c) return error{"cannot open libvirt at " + uri + ": " + libvirt_message()};
  host_facts h;
  virNodeInfo ni{};
  if (virNodeGetInfo(c.get(), &ni) != 0) return error{"libvirt at " + uri + ": node info: " + libvirt_message()};
  h.cpus = ni.cpus;
  h.mem_bytes = static_cast<double>(ni.memory) * 1024;  // KiB
  virDomainPtr* doms = nullptr;
  const int n = virConnectListAllDomains(c.get(), &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
  if (n < 0) return error{"libvirt at " + uri + ": listing domains: " + libvirt_message()};
  for (int i = 0; i < n; ++i) {
    domain_ref d(doms[i]);
    h.domains.push_back(facts_of(d.get()));
  }
  free(doms);
  return h;
}

namespace {

migration_progress job_progress(virDomainPtr d, double elapsed) {
  migration_progress p{elapsed};
  int type = 0, n = 0;
  virTypedParameterPtr params = nullptr;
  if (virDomainGetJobStats(d, &type, &params, &n, 0) != 0) return p;
  unsigned long long v = 0;
  if (virTypedParamsGetULLong(params, n, VIR_DOMAIN_JOB_DATA_PROCESSED, &v) == 1) p.processed_bytes = v;
  if (virTypedParamsGetULLong(params, n, VIR_DOMAIN_JOB_DATA_TOTAL, &v) == 1) p.total_bytes = v;
  if (virTypedParamsGetULLong(params, n, VIR_DOMAIN_JOB_DATA_REMAINING, &v) == 1) p.remaining_bytes = v;
  virTypedParamsFree(params, n);
  return p;
}

class lv_migrator : public migrator {
 public:
  explicit lv_migrator(std::map<std::string, std::string> uris) : uris_(std::move(uris)) { init_libvirt(); }

  result<bool> persistent_on(const std::string& vm, const std::string& host) override {
    auto d = lookup(vm, host);
    if (!d) return d.err();
    if (!*d) return false;
    const int r = virDomainIsPersistent(d->get());
    if (r < 0) return error{host + ": " + vm + ": " + libvirt_message()};
    return r == 1;
  }

  result<bool> active_on(const std::string& vm, const std::string& host) override {
    auto d = lookup(vm, host);
    if (!d) return d.err();
    if (!*d) return false;
    const int r = virDomainIsActive(d->get());
    if (r < 0) return error{host + ": " + vm + ": " + libvirt_message()};
    return r == 1;
  }

  result<std::string> definition(const std::string& vm, const std::string& host) override {
    auto d = lookup(vm, host);
    if (!d) return d.err();
    if (!*d) return error{host + ": no domain " + vm};
    char* xml = virDomainGetXMLDesc(d->get(), VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
    if (!xml) return error{host + ": " + vm + ": " + libvirt_message()};
    std::string out(xml);
    free(xml);
    return out;
  }

  status define(const std::string& vm, const std::string& host, const std::string& xml) override {
    auto c = conn(host);
    if (!c) return c.err();
    virDomainPtr d = virDomainDefineXML(*c, xml.c_str());
    if (!d) return error{host + ": defining " + vm + ": " + libvirt_message()};
    virDomainFree(d);
    return {};
  }

  status migrate(const std::string& vm, const std::string& from, const std::string& to,
                 std::chrono::milliseconds timeout, const progress_fn& progress) override;

 private:
  result<virConnectPtr> conn(const std::string& host) {
    if (auto it = conns_.find(host); it != conns_.end()) return it->second.get();
    auto u = uris_.find(host);
    if (u == uris_.end()) return error{"no libvirt URI for host " + host};
    virConnectPtr c = virConnectOpen(u->second.c_str());
    if (!c) return error{"cannot open libvirt at " + u->second + " (host " + host + "): " + libvirt_message()};
    conns_.emplace(host, conn_ref(c));
    return c;
  }

  // The domain @vm on @host; a null one when the host has none of that name.
  result<domain_ref> lookup(const std::string& vm, const std::string& host) {
    auto c = conn(host);
    if (!c) return c.err();
    virDomainPtr d = virDomainLookupByName(*c, vm.c_str());
    if (!d && !last_error_is_no_domain()) return error{host + ": looking up " + vm + ": " + libvirt_message()};
    return domain_ref(d);
  }

  std::map<std::string, std::string> uris_;
  std::map<std::string, conn_ref> conns_;
};

status lv_migrator::migrate(const std::string& vm, const std::string& from, const std::string& to,
                            std::chrono::milliseconds timeout, const progress_fn& progress) {
  auto d = lookup(vm, from);
  if (!d) return d.err();
  if (!*d) return error{from + " has no domain " + vm};
  // The destination reachable from here too, before anything moves.
  if (auto c = conn(to); !c) return c.err();
  const std::string dest = uris_.at(to);
  virDomainPtr dom = d->get();
  struct outcome {
    int rc;
    std::string message;
  };
  // The migration blocks until it ends; its job is watched from here.
  auto job = std::async(std::launch::async, [dom, dest] {
    const unsigned flags =
        VIR_MIGRATE_LIVE | VIR_MIGRATE_PEER2PEER | VIR_MIGRATE_PERSIST_DEST | VIR_MIGRATE_UNDEFINE_SOURCE;
    const int rc = virDomainMigrateToURI3(dom, dest.c_str(), nullptr, 0, flags);
    return outcome{rc, rc == 0 ? "" : libvirt_message()};
  });
  const auto t0 = std::chrono::steady_clock::now();
  bool aborted = false;
  std::string abort_failed;
  while (job.wait_for(std::chrono::seconds(1)) != std::future_status::ready) {
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    progress(job_progress(dom, std::chrono::duration<double>(elapsed).count()));
    if (!aborted && elapsed > timeout) {
      aborted = true;
      // Then wait for the migration to end all the same: it owns the domain.
      if (virDomainAbortJob(dom) != 0) abort_failed = "; aborting it failed: " + libvirt_message();
    }
  }
  const outcome o = job.get();
  if (o.rc == 0) return {};
  if (aborted)
    return error{"did not finish within " + std::to_string(timeout.count() / 1000) + " s (--timeout): " +
                 "aborted (" + o.message + ")" + abort_failed};
  return error{o.message};
}

}  // namespace

std::unique_ptr<migrator> libvirt_migrator(std::map<std::string, std::string> uris) {
  return std::make_unique<lv_migrator>(std::move(uris));
}

}  // namespace magnet::fleet
