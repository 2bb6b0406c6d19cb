// The domain-XML reader (domain_xml.h).  Rules:
//  * the document is parsed by libxml2 as it is, never "recovered": not
//    well-formed is an error; no network, no entity substitution, and a
//    DOCTYPE stops the parser before its declarations are read (libvirt
//    never writes one, so no entity expansion is ever reached);
//  * each fact is one fixed XPath from the root; names without a prefix
//    match only elements in no namespace, so a <metadata> child, which
//    libvirt requires to carry a namespace, never matches, at any depth;
//  * numbers are decimal digits only, as libvirt writes them (std::from_chars
//    over the whole value: no sign, space, hex or leading zero), and a value
//    out of the fact's range is an error, never wrapped (a CID of 2^32 + 7
//    is not CID 7);
//  * nothing here throws but std::bad_alloc.
#include "magnet/registry/domain_xml.h"

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>
#include <linux/vm_sockets.h>
#include <net/if.h>

#include <charconv>
#include <memory>
#include <mutex>

namespace magnet::host {
namespace {

struct doc_free {
  void operator()(xmlDoc* d) const { xmlFreeDoc(d); }
};
struct ctxt_free {
  void operator()(xmlParserCtxt* c) const { xmlFreeParserCtxt(c); }
};
struct xpath_ctx_free {
  void operator()(xmlXPathContext* c) const { xmlXPathFreeContext(c); }
};
struct xpath_obj_free {
  void operator()(xmlXPathObject* o) const { xmlXPathFreeObject(o); }
};
using doc_ptr = std::unique_ptr<xmlDoc, doc_free>;

// Text from the document as it may appear in a message: bounded, printable
// ASCII only (a hostile description must not write control characters or
// pages of text into the log).
std::string printable(std::string_view v, size_t max) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max; ++i) s += v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
  return v.size() > max ? s + "..." : s;
}

std::string shown(std::string_view v) { return "'" + printable(v, 40) + "'"; }

error bad(std::string_view path, std::string_view value, std::string_view why) {
  return error{"domain XML: " + std::string(path) + " " + shown(value) + " " + std::string(why)};
}

template <class T>
result<T> number(std::string_view path, std::string_view v, std::string_view range) {
  T n{};
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec == std::errc::result_out_of_range) return bad(path, v, "is out of range (" + std::string(range) + ")");
  // As libvirt writes it (%u): digits, no leading zero, so one value has
  // one spelling.
  if (v.empty() || ec != std::errc{} || end != v.data() + v.size() || (v.size() > 1 && v[0] == '0'))
    return bad(path, v, "is not a decimal number");
  return n;
}

// The kernel's dev_valid_name(): what can name a tap at all.
bool interface_name(std::string_view n) {
  if (n.empty() || n.size() >= IFNAMSIZ || n == "." || n == "..") return false;
  for (char c : n)
    if (c == '/' || c == ':' || c == ' ' || (c >= '\t' && c <= '\r')) return false;
  return true;
}

// libvirt never writes a DOCTYPE; one is refused before its declarations
// (entities) are parsed.
void refuse_doctype(void* ctx, const xmlChar*, const xmlChar*, const xmlChar*) {
  auto* c = static_cast<xmlParserCtxt*>(ctx);
  c->_private = c;  // marks why the parser stopped
  xmlStopParser(c);
}

result<doc_ptr> parse(std::string_view xml) {
  if (xml.size() > kMaxDomainXmlBytes)
    return error{"domain XML of " + std::to_string(xml.size()) + " bytes is larger than " +
                 std::to_string(kMaxDomainXmlBytes) + " bytes"};
  static std::once_flag once;
  std::call_once(once, [] { xmlInitParser(); });
  std::unique_ptr<xmlParserCtxt, ctxt_free> ctxt(xmlNewParserCtxt());
  if (!ctxt) return error{"domain XML: libxml2 could not make a parser"};
  ctxt->sax->internalSubset = refuse_doctype;
  ctxt->sax->externalSubset = refuse_doctype;
  ctxt->_private = nullptr;
  doc_ptr doc(xmlCtxtReadMemory(ctxt.get(), xml.data(), static_cast<int>(xml.size()), nullptr, "UTF-8",
                                XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
  if (ctxt->_private) return error{"domain XML: a DOCTYPE is not accepted (libvirt writes none)"};
  if (!doc || !ctxt->wellFormed) {
    const xmlError* e = xmlCtxtGetLastError(ctxt.get());
    std::string why = e && e->message ? e->message : "unknown error";
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    // libxml2's message may quote the document (an element's name).
    return error{"domain XML is not well-formed: " +
                 (e ? "line " + std::to_string(e->line) + ": " : std::string()) + printable(why, 160)};
  }
  const xmlNode* root = xmlDocGetRootElement(doc.get());
  if (!root || root->ns || std::string_view(reinterpret_cast<const char*>(root->name)) != "domain")
    return error{"domain XML: the root element is not <domain>"};
  return doc;
}

// The string values of the nodes @path selects, in document order.
result<std::vector<std::string>> values(xmlXPathContext* x, const char* path) {
  std::unique_ptr<xmlXPathObject, xpath_obj_free> o(
      xmlXPathEvalExpression(reinterpret_cast<const xmlChar*>(path), x));
  if (!o || o->type != XPATH_NODESET) return error{std::string("domain XML: cannot evaluate ") + path};
  std::vector<std::string> out;
  for (int i = 0; o->nodesetval && i < o->nodesetval->nodeNr; ++i) {
    xmlChar* v = xmlNodeGetContent(o->nodesetval->nodeTab[i]);
    out.emplace_back(v ? reinterpret_cast<const char*>(v) : "");
    xmlFree(v);
  }
  return out;
}

status read_cid(xmlXPathContext* x, domain_xml_facts& f) {
  static constexpr const char* kPath = "/domain/devices/vsock/cid/@address";
  auto v = values(x, kPath);
  if (!v) return v.err();
  if (v->empty()) return {};
  if (v->size() > 1)
    return error{"domain XML: " + std::to_string(v->size()) + " values of " + kPath +
                 " (libvirt gives a domain one vsock device)"};
  auto cid = number<uint32_t>(kPath, v->front(), "a CID is 32 bits");
  if (!cid) return cid.err();
  // 0 hypervisor, 1 local, 2 host, -1 any: never a guest's.
  if (*cid <= VMADDR_CID_HOST || *cid == VMADDR_CID_ANY)
    return bad(kPath, v->front(), "is a reserved CID, never a guest's");
  f.vsock_cid = *cid;
  return {};
}

status read_taps(xmlXPathContext* x, domain_xml_facts& f) {
  static constexpr const char* kPath = "/domain/devices/interface/target[1]/@dev";
  auto v = values(x, kPath);
  if (!v) return v.err();
  for (auto& n : *v) {
    if (!interface_name(n)) return bad(kPath, n, "is not a network interface name");
    f.taps.push_back(std::move(n));
  }
  return {};
}

status read_view_channel(xmlXPathContext* x, domain_xml_facts& f) {
  static const std::string path = std::string("/domain/devices/channel[@type='unix'][target/@name='") +
                                  kViewChannelName + "']/source[@mode='bind']/@path";
  auto v = values(x, path.c_str());
  if (!v) return v.err();
  for (auto& p : *v)
    if (!p.empty()) {
      f.view_channel = std::move(p);
      break;
    }
  return {};
}

// Sums one direction's averages over the interfaces, in bit/s.
status read_bandwidth(xmlXPathContext* x, const char* path, double& bps) {
  auto v = values(x, path);
  if (!v) return v.err();
  for (const auto& s : *v) {
    auto kbytes = number<uint64_t>(path, s, "kilobytes/s as 64 bits");
    if (!kbytes) return kbytes.err();
    bps += 8000.0 * static_cast<double>(*kbytes);
  }
  return {};
}

}  // namespace

result<domain_xml_facts> parse_domain_xml(std::string_view xml) {
  auto doc = parse(xml);
  if (!doc) return doc.err();
  std::unique_ptr<xmlXPathContext, xpath_ctx_free> x(xmlXPathNewContext(doc->get()));
  if (!x) return error{"domain XML: libxml2 could not make an XPath context"};
  domain_xml_facts f;
  if (auto s = read_cid(x.get(), f); !s) return s.err();
  if (auto s = read_taps(x.get(), f); !s) return s.err();
  if (auto s = read_view_channel(x.get(), f); !s) return s.err();
  if (auto s = read_bandwidth(x.get(), "/domain/devices/interface/bandwidth[1]/outbound[1]/@average",
                              f.allowance_tx_bps);
      !s)
    return s.err();
  if (auto s = read_bandwidth(x.get(), "/domain/devices/interface/bandwidth[1]/inbound[1]/@average",
                              f.allowance_rx_bps);
      !s)
    return s.err();
  return f;
}

}  // namespace magnet::host
