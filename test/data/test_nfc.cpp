// NFC (normalize_nfc.h) against the Unicode conformance test
// (fixtures/nfc_conformance.txt, from NormalizationTest.txt by
// make_nfc_reference.js, which also checked it against ICU's NFC).
#include <fstream>
#include <sstream>
#include <string>

#include "data_test_util.h"
#include "engine/data/normalize_nfc.h"
#include "engine/json.h"

using namespace trainer::engine::data;
using trainer::engine::append_utf8;
using data_test::fixture;

namespace {

std::string utf8_of(const std::string& hex_list) {
  std::string out;
  std::istringstream in(hex_list);
  std::string h;
  while (in >> h) append_utf8(out, static_cast<uint32_t>(std::stoul(h, nullptr, 16)));
  return out;
}

}  // namespace

TEST_CASE("nfc: the Unicode conformance test's NFC columns", "[data][nfc]") {
  std::ifstream in(fixture("nfc_conformance.txt"));
  REQUIRE(in);
  std::string line;
  int lines = 0, changed = 0;
  while (std::getline(in, line)) {
    std::string col[5];
    std::istringstream cols(line);
    for (auto& c : col) std::getline(cols, c, ';');
    const std::string c1 = utf8_of(col[0]), c2 = utf8_of(col[1]), c3 = utf8_of(col[2]);
    const std::string c4 = utf8_of(col[3]), c5 = utf8_of(col[4]);
    INFO("line " << lines + 1 << ": " << line);
    CHECK(nfc(c1) == c2);
    CHECK(nfc(c2) == c2);
    CHECK(nfc(c3) == c2);
    CHECK(nfc(c4) == c4);
    CHECK(nfc(c5) == c4);
    // The quick check never calls a changed text unchanged.
    if (c2 != c3) CHECK_FALSE(nfc_unchanged(c3));
    if (nfc_unchanged(c1)) CHECK(c1 == c2);
    changed += c1 != c2;
    ++lines;
  }
  CHECK(lines == 8288);
  CHECK(changed > 1000);
}

TEST_CASE("nfc: text around the characters it changes is kept", "[data][nfc]") {
  // "e" + combining acute composes; a Hangul L+V+T sequence becomes one syllable;
  // U+212B ANGSTROM SIGN is a singleton (to U+00C5); marks out of order are sorted.
  CHECK(nfc("cafe\xCC\x81 ok") == "caf\xC3\xA9 ok");
  CHECK(nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB") == "\xED\x95\x9C");
  CHECK(nfc("\xE2\x84\xAB") == "\xC3\x85");
  // a + U+0301 (230) + U+0323 (220): reordered to a-dot-below, then acute on top.
  CHECK(nfc("a\xCC\x81\xCC\xA3") == "\xE1\xBA\xA1\xCC\x81");
  // Already NFC: ASCII, precomposed Latin, CJK, Hangul syllables.
  for (const char* s : {"plain ascii\n\t", "caf\xC3\xA9", "\xE4\xBD\xA0\xE5\xA5\xBD", "\xED\x95\x9C"}) {
    CHECK(nfc_unchanged(s));
    CHECK(nfc(s) == s);
  }
  CHECK_FALSE(nfc_unchanged("cafe\xCC\x81"));
  // Bytes that are not UTF-8 pass through and block composition across them.
  CHECK(nfc(std::string("e\xFF\xCC\x81", 4)) == std::string("e\xFF\xCC\x81", 4));
  CHECK(nfc(std::string("\xFF" "e\xCC\x81", 4)) == std::string("\xFF\xC3\xA9", 3));
}
