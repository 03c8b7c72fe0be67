#include "kiln/tensorboard/record.h"

#include <isa-l/crc.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kiln/error.h"

namespace kiln::tensorboard {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  // ISA-L's crc32_iscsi is the CRC32C register without the final inversion,
  // and takes an int length: feed it in chunks.
  uint32_t crc = 0xffffffffu;
  auto* p = reinterpret_cast<unsigned char*>(const_cast<char*>(data.data()));
  for (size_t left = data.size(); left > 0;) {
    const int n = static_cast<int>(std::min<size_t>(left, size_t{1} << 30));
    crc = crc32_iscsi(p, n, crc);
    p += n;
    left -= static_cast<size_t>(n);
  }
  return ~crc;
}

uint32_t mask_crc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc(crc32c(out)), 4);
  out.append(data);
  put_le(out, mask_crc(crc32c(data)), 4);
  return out;
}

std::vector<std::string> parse_records(std::string_view bytes, const std::string& what) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    KILN_CHECK(bytes.size() - at >= 12, "[tensorboard] ", what,
               ": truncated record header at byte ", at, " (", bytes.size() - at,
               " bytes left, a header is 12)");
    const uint64_t len = get_le(bytes, at, 8);
    const uint32_t len_crc = static_cast<uint32_t>(get_le(bytes, at + 8, 4));
    KILN_CHECK(len_crc == mask_crc(crc32c(bytes.substr(at, 8))), "[tensorboard] ", what,
               ": bad length CRC at byte ", at);
    KILN_CHECK(len <= bytes.size() - at - 12 && bytes.size() - at - 12 - len >= 4, "[tensorboard] ",
               what, ": record at byte ", at, " claims ", len, " bytes but only ",
               bytes.size() - at - 12, " follow");
    std::string_view data = bytes.substr(at + 12, len);
    const uint32_t data_crc = static_cast<uint32_t>(get_le(bytes, at + 12 + len, 4));
    KILN_CHECK(data_crc == mask_crc(crc32c(data)), "[tensorboard] ", what,
               ": bad data CRC in the record at byte ", at);
    records.emplace_back(data);
    at += 12 + len + 4;
  }
  return records;
}

std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in, "[tensorboard] cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  KILN_CHECK(!in.bad(), "[tensorboard] cannot read '", path, "'");
  return parse_records(ss.view(), path);
}

}  // namespace kiln::tensorboard
