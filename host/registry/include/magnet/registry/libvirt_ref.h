// Owned references to a libvirt connection and domain, released when they
// go, and this thread's last libvirt error as text: what every user of
// libvirt here (the registry, magnet place's fleet reader) needs alike.
#pragma once

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <memory>
#include <string>

namespace magnet::host {

struct conn_release {
  void operator()(virConnectPtr c) const { virConnectClose(c); }
};
struct domain_release {
  void operator()(virDomainPtr d) const { virDomainFree(d); }
};
using conn_ref = std::unique_ptr<virConnect, conn_release>;
using domain_ref = std::unique_ptr<virDomain, domain_release>;

// This thread's last libvirt error ("unknown error" when libvirt set none).
inline std::string libvirt_message() {
  virErrorPtr e = virGetLastError();
  return e && e->message ? e->message : "unknown error";
}

}  // namespace magnet::host
