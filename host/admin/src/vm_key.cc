#include "magnet/admin/vm_key.h"

#include <string_view>

namespace magnet::host {

namespace {

enum field : unsigned { by_id = 1, by_uuid = 2, by_name = 4 };

// The fields a key prefix restricts matching to; all three without one.
unsigned fields_of(std::string_view& key) {
  for (auto [prefix, f] : {std::pair{std::string_view("id:"), by_id},
                           {std::string_view("uuid:"), by_uuid},
                           {std::string_view("name:"), by_name}})
    if (key.substr(0, prefix.size()) == prefix) {
      key.remove_prefix(prefix.size());
      return f;
    }
  return by_id | by_uuid | by_name;
}

std::string matched_as(unsigned m) {
  std::string s;
  for (auto [f, what] : {std::pair{by_id, "magnet id"}, {by_uuid, "UUID"}, {by_name, "name"}})
    if (m & f) s += (s.empty() ? "its " : " and ") + std::string(what);
  return s;
}

// A reply is one line: a name or key with control characters (libvirt
// names are the domain's owner's to choose) must not break it.
std::string printable(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

}  // namespace

result<size_t> find_vm_by_key(const std::vector<vm_ref>& vms, const std::string& key) {
  std::string_view k = key;
  const unsigned fields = fields_of(k);
  std::vector<std::pair<size_t, unsigned>> hits;  // VM, the fields it matched by
  for (size_t i = 0; i < vms.size(); ++i) {
    const vm_ref& v = vms[i];
    unsigned m = 0;
    if ((fields & by_id) && std::to_string(v.id) == k) m |= by_id;
    if ((fields & by_uuid) && !v.uuid.empty() && v.uuid == k) m |= by_uuid;
    if ((fields & by_name) && !v.name.empty() && v.name == k) m |= by_name;
    if (m) hits.emplace_back(i, m);
  }
  if (hits.size() == 1) return hits[0].first;
  if (hits.empty())
    return error{"no running VM named '" + printable(key) + "' (by name, UUID or magnet id)"};
  std::string e = "'" + printable(key) + "' names " + std::to_string(hits.size()) + " VMs:";
  std::string ids;
  for (size_t n = 0; n < hits.size(); ++n) {
    const vm_ref& v = vms[hits[n].first];
    e += std::string(n ? "," : "") + " VM " + std::to_string(v.id) + " ('" + printable(v.name) + "', UUID " +
         printable(v.uuid) + ") by " + matched_as(hits[n].second);
    ids += std::string(n ? ", " : "") + "id:" + std::to_string(v.id);
  }
  return error{e + "; a name never stands for another VM's id or UUID: ask for one of them as " +
               ids + " (or uuid:UUID, name:NAME)"};
}

}  // namespace magnet::host
