// libFuzzer target: the VM registry's domain-XML reader
// (host/registry/include/magnet/registry/domain_xml.h), which reads what
// libvirt says of a domain, parts of which (metadata, names, aliases) a
// management layer may let a tenant write.  Oracles besides the sanitizers:
//  * a refusal has a message; an accepted CID is never a reserved one;
//  * the facts equal those found by walking libxml2's tree by hand
//    (root <domain>, its <devices>, their <vsock>/<cid>, <interface>/
//    <target>, <channel>s, all in no namespace): nothing but the exact
//    elements gives a fact;
//  * impostors added where no fact lives (a <metadata> with vsock CIDs and
//    taps in two namespaces, a <vsock> and an <interface> under the root,
//    others nested deeper under <devices>, a CID in a comment) change no
//    fact of an accepted document, nor its acceptance.
#include <libxml/parser.h>
#include <libxml/tree.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/registry/domain_xml.h"

using namespace magnet::host;

namespace {

bool named(const xmlNode* n, const char* name) {
  return n->type == XML_ELEMENT_NODE && !n->ns && std::string_view(reinterpret_cast<const char*>(n->name)) == name;
}

// An attribute in no namespace, as XPath's @name selects it.
std::optional<std::string> attr(const xmlNode* n, const char* name) {
  xmlChar* v = xmlGetNoNsProp(n, reinterpret_cast<const xmlChar*>(name));
  if (!v) return {};
  std::string s(reinterpret_cast<const char*>(v));
  xmlFree(v);
  return s;
}

template <class F>
void children(const xmlNode* n, const char* name, F f) {
  for (const xmlNode* c = n->children; c; c = c->next)
    if (named(c, name)) f(c);
}

struct walked {
  std::vector<std::string> cids, taps;
  std::string view_channel;
  bool ok = false;
};

bool view_target(const xmlNode* ch) {
  bool is = false;
  children(ch, "target", [&](const xmlNode* t) {
    is |= attr(t, "name") == std::optional<std::string>(kViewChannelName);
  });
  return is;
}

walked walk(std::string_view xml) {
  walked w;
  xmlDoc* doc = xmlReadMemory(xml.data(), static_cast<int>(xml.size()), nullptr, "UTF-8",
                              XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (!doc) return w;
  const xmlNode* root = xmlDocGetRootElement(doc);
  w.ok = root && named(root, "domain");
  if (w.ok)
    children(root, "devices", [&](const xmlNode* dev) {
      children(dev, "vsock", [&](const xmlNode* v) {
        children(v, "cid", [&](const xmlNode* c) {
          if (auto a = attr(c, "address")) w.cids.push_back(*a);
        });
      });
      children(dev, "interface", [&](const xmlNode* i) {
        bool first = true;
        children(i, "target", [&](const xmlNode* t) {
          if (auto d = attr(t, "dev"); d && first) w.taps.push_back(*d);
          first = false;
        });
      });
      children(dev, "channel", [&](const xmlNode* ch) {
        if (attr(ch, "type") != std::optional<std::string>("unix") || !view_target(ch)) return;
        children(ch, "source", [&](const xmlNode* s) {
          auto path = attr(s, "path");
          if (w.view_channel.empty() && attr(s, "mode") == std::optional<std::string>("bind") && path)
            w.view_channel = *path;
        });
      });
    });
  xmlFreeDoc(doc);
  return w;
}

const xmlChar* x(const char* s) { return reinterpret_cast<const xmlChar*>(s); }

xmlNode* add(xmlNode* parent, xmlNs* ns, const char* name, const char* attr = nullptr, const char* value = nullptr) {
  xmlNode* n = xmlNewChild(parent, ns, x(name), nullptr);
  if (attr) xmlNewProp(n, x(attr), x(value));
  return n;
}

// @xml (accepted, so well-formed without a DOCTYPE) with impostors where no
// fact lives, written out again by libxml2; "" if that fails.
std::string with_impostors(std::string_view xml) {
  xmlDoc* doc = xmlReadMemory(xml.data(), static_cast<int>(xml.size()), nullptr, "UTF-8",
                              XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (!doc) return {};
  xmlNode* root = xmlDocGetRootElement(doc);
  std::vector<xmlNode*> devices;
  for (xmlNode* c = root->children; c; c = c->next)
    if (named(c, "devices")) devices.push_back(c);
  // <metadata>: a prefixed namespace and a default one (libvirt keeps both).
  xmlNode* md = add(root, nullptr, "metadata");
  xmlNs* t = xmlNewNs(md, x("urn:t"), x("t"));
  add(add(add(md, t, "devices"), t, "vsock"), t, "cid", "address", "4242");
  xmlNode* info = add(md, nullptr, "info");
  xmlNs* u = xmlNewNs(info, x("urn:u"), nullptr);
  xmlSetNs(info, u);
  xmlNode* ud = add(info, u, "devices");
  add(add(ud, u, "vsock"), u, "cid", "address", "4343");
  add(add(ud, u, "interface"), u, "target", "dev", "imp0");
  // Under the root and deeper under <devices>, in no namespace.
  add(add(root, nullptr, "vsock"), nullptr, "cid", "address", "4444");
  add(add(root, nullptr, "interface"), nullptr, "target", "dev", "imp1");
  for (xmlNode* d : devices) {
    add(add(add(d, nullptr, "controller"), nullptr, "vsock"), nullptr, "cid", "address", "4545");
    add(add(add(d, nullptr, "hostdev"), nullptr, "interface"), nullptr, "target", "dev", "imp2");
    xmlAddChild(d, xmlNewComment(x("<vsock><cid address='4646'/></vsock>")));
  }
  xmlChar* out = nullptr;
  int len = 0;
  xmlDocDumpMemoryEnc(doc, &out, &len, "UTF-8");
  std::string s = out ? std::string(reinterpret_cast<const char*>(out), len) : "";
  xmlFree(out);
  xmlFreeDoc(doc);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (64u << 10)) return 0;  // the limit itself is a unit test
  std::string_view xml(reinterpret_cast<const char*>(data), size);
  auto f = parse_domain_xml(xml);
  if (!f) {
    if (f.err().message.empty()) abort();
    return 0;
  }
  if (f->vsock_cid != 0 && (f->vsock_cid <= 2 || f->vsock_cid == UINT32_MAX)) abort();
  if (f->allowance_tx_bps < 0 || f->allowance_rx_bps < 0) abort();
  walked w = walk(xml);
  if (!w.ok || w.cids.size() > 1) abort();  // accepted, so well-formed with one CID at most
  if (w.cids.empty() ? f->vsock_cid != 0 : std::to_string(f->vsock_cid) != w.cids.front()) abort();
  if (w.taps != f->taps || w.view_channel != f->view_channel) abort();
  std::string imp = with_impostors(xml);
  if (imp.empty()) abort();
  auto g = parse_domain_xml(imp);
  if (!g || !(*g == *f)) abort();
  return 0;
}
