// Stand-in for a telemetry provider: a flag that records whether events would be sent.
namespace mini_ort::telemetry {

namespace {
bool g_enabled = true;
}  // namespace

void Shutdown() { g_enabled = false; }

bool IsEnabled() { return g_enabled; }

}  // namespace mini_ort::telemetry
