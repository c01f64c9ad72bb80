// The Brown corpus as scripts/fetch_data.sh brown lays it out (data/brown/ca01 .. cr09: one
// tab-indented sentence per paragraph, tokens written word/tag), turned into plain text for
// the tokenizer and build/bin/gpt-prepare.
//
// Invariants:
// - brown_untag keeps each token's text before its LAST '/' ("1/2/cd" -> "1/2"; a token
//   without '/' is kept whole), joins the words of a sentence with one space and puts one
//   sentence per line ("\n"-terminated); blank lines and indentation are dropped.
// - brown_files lists the 500 corpus files (names c[a-r][0-9][0-9]) in name order; a folder
//   without them is an ember::IOError naming it and the fetch command.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ember::data {

std::string brown_untag(std::string_view tagged);
std::vector<std::string> brown_files(const std::string& dir);

}  // namespace ember::data
