// Checkpoint loading: a safetensors header of 100,000 zero-size entries (the
// header parse and StateDict building alone, no tensor bytes), in memory and
// through a file.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "kiln/serialize.h"

namespace {

// A safetensors file whose header lists `n` F32 tensors of shape [0].
std::string many_entries(int n) {
  std::string header = "{";
  for (int i = 0; i < n; ++i) {
    if (i) header += ',';
    header += "\"layer." + std::to_string(i) +
              R"(.bias":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  }
  header += '}';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header;
}

void BM_ParseHeaderEntries(benchmark::State& state) {
  const std::string file = many_entries(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(kiln::parse_safetensors(file, "bench").size());
  state.counters["header_MB"] = static_cast<double>(file.size()) / 1e6;
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_ParseHeaderEntries)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_LoadFileHeaderEntries(benchmark::State& state) {
  const std::string path = "/tmp/kiln_serialize_bench_" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary) << many_entries(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(kiln::load_safetensors(path).size());
  std::remove(path.c_str());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_LoadFileHeaderEntries)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
