// fp8_state_check REF_STEP_DIR MESH_STEP_DIR RTOL WEIGHT_RTOL: every fp8
// scaling state (`*.fp8_state`: the scale, then the amax history) of the
// reference checkpoint is in the mesh's, equal within RTOL relative, weights'
// within WEIGHT_RTOL. The losses of an fp8 mesh hide a wrong amax reduction
// (a max over the wrong ranks moves the scales by a few percent, the losses
// by less than the mesh's own rounding); the states show it. After step 1 a
// weight's amax is of the initial weights, the same on every layout, so it
// must agree exactly; inputs and output gradients differ by their rounding
// (a bf16 ulp, 0.4%; an E5M2 gradient at the initial scale 1 underflows
// differently where a mesh's is a power of two larger).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"

using trainer::engine::checkpoint::CheckpointReader;
using trainer::engine::checkpoint::Slice;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: fp8_state_check REF_STEP_DIR MESH_STEP_DIR RTOL WEIGHT_RTOL\n");
    return 2;
  }
  try {
    CheckpointReader ref(argv[1]), mesh(argv[2]);
    const double rtol_other = std::atof(argv[3]), rtol_weight = std::atof(argv[4]);
    int compared = 0, bad = 0;
    double worst = 0;
    std::string worst_name;
    auto read = [](const CheckpointReader& r, const std::string& name) {
      Slice s = Slice::whole(r.any_slice(name).global_shape);
      std::vector<float> v(static_cast<size_t>(s.numel()));
      r.read(name, s, v.data());
      return v;
    };
    for (const std::string& name : ref.names()) {
      if (name.size() < 10 || name.compare(name.size() - 10, 10, ".fp8_state") != 0) continue;
      if (!mesh.has(name)) {
        std::printf("FAIL %s: missing in %s\n", name.c_str(), argv[2]);
        ++bad;
        continue;
      }
      std::vector<float> a = read(ref, name), b = read(mesh, name);
      if (a.size() != b.size()) {
        std::printf("FAIL %s: %zu values vs %zu\n", name.c_str(), a.size(), b.size());
        ++bad;
        continue;
      }
      ++compared;
      const double rtol = name.find(".weight.") != std::string::npos ? rtol_weight : rtol_other;
      // An output gradient on a mesh is its rank's share before the dp
      // average (1 / its micro-batches, not the step's): a power of two apart
      // from one rank's when the counts are, and so are its amaxes and scale,
      // which leaves the fp8 codes unchanged. Compare modulo that factor.
      // State: [scale, amax history...]; f = one rank's amax / the mesh's.
      double f = 1;
      if (name.find(".grad_output.") != std::string::npos)
        for (size_t i = 1; i < a.size(); ++i)
          if (a[i] != 0 && b[i] != 0) {
            f = std::exp2(std::round(std::log2(double(a[i]) / b[i])));
            break;
          }
      for (size_t i = 0; i < a.size(); ++i) {
        const double bi = i == 0 ? b[i] / f : b[i] * f;
        const double d = std::fabs(a[i] - bi), r = a[i] != 0 ? d / std::fabs(a[i]) : d;
        if (r > worst) worst = r, worst_name = name;
        if (r > rtol) {
          std::printf("FAIL %s[%zu]: %g vs %g (relative %g)\n", name.c_str(), i, a[i], bi, r);
          ++bad;
          break;
        }
      }
    }
    std::printf("%d fp8 states compared, worst relative difference %g (%s)\n", compared, worst,
                worst_name.c_str());
    return bad == 0 && compared > 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8_state_check: %s\n", e.what());
    return 1;
  }
}
