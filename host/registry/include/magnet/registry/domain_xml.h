// A libvirt domain's live description (virDomainGetXMLDesc), read for the
// facts the registry needs.  Each fact comes from one exact path (libxml2
// XPath from the root), so nothing elsewhere in the document counts: a
// <cid> in <metadata>, which a management layer may let a tenant write, in a
// comment or under another device is never the VM's.  Reading never throws:
// a document that is not well-formed, carries a DOCTYPE, or has a fact that
// is not what libvirt writes (a CID out of range, a number that is not one)
// is an error that names the path and the value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/result.h"

namespace magnet::host {

inline constexpr const char* kViewChannelName = "org.magnet.view.0";
// libvirt's descriptions are a few kilobytes; this bounds a hostile one.
inline constexpr size_t kMaxDomainXmlBytes = 4u << 20;

struct domain_xml_facts {
  // /domain/devices/interface/target[1]/@dev, in document order.
  std::vector<std::string> taps;
  // /domain/devices/vsock/cid/@address; 0 = no vsock device (or no CID yet).
  uint32_t vsock_cid = 0;
  // /domain/devices/channel[@type='unix'][target/@name=kViewChannelName]
  //   /source[@mode='bind']/@path: the unix socket QEMU listens on, which
  // the daemon dials; "" = none.  QEMU connecting out (mode connect) is not
  // a channel the daemon can dial.
  std::string view_channel;
  // /domain/devices/interface/bandwidth[1]/{outbound,inbound}[1]/@average,
  // kilobytes/s (libvirt hands them to tc as "kbps", 8000 bit/s each),
  // summed over interfaces, in bit/s: outbound is what the guest sends (TX),
  // inbound what it receives (RX).
  double allowance_tx_bps = 0, allowance_rx_bps = 0;
  bool operator==(const domain_xml_facts&) const = default;
};

result<domain_xml_facts> parse_domain_xml(std::string_view xml);

}  // namespace magnet::host
