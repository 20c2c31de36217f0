// The data files users extend (presets/, devices/, protocols/) live under one directory: the source
// tree's at build time (compile definition HOOKSTREAM_DATA_DIR), or the HOOKSTREAM_DATA_DIR
// environment variable when set. One place for finding and listing them.
#pragma once

#include <string>
#include <vector>

namespace hookstream {

std::string data_dir();
// The names (file stems) of `data_dir()/subdir/*extension`, sorted case-insensitively.
std::vector<std::string> list_data_files(const std::string& subdir, const std::string& extension);
// ASCII lower case, for the case-insensitive name matching of every input file.
std::string lowercase(std::string text);

}  // namespace hookstream
