// irb_reader: a minimal simulator-side reader of irbridge .irb files, in C++ with the
// bindings protoc generates from schemas/irbridge/v1/irbridge.proto.
//
// Build (Debian: protobuf-compiler, libprotobuf-dev, g++; docs/simulators.md explains):
//   protoc -I schemas --cpp_out=build schemas/irbridge/v1/irbridge.proto
//   g++ -std=c++17 -I build tools/cpp_reader/irb_reader.cpp \
//       build/irbridge/v1/irbridge.pb.cc -lprotobuf -pthread -o irb_reader
//
// Usage: irb_reader MODEL.irb
// Prints one header line, then one tab-separated line per node (subgraph nodes included):
//   model <name> ir_version <v> graphs <g> nodes <n> tensors <t> external <e> shape_only <s>
//   node <graph> <id> <op> <output types> <macs> <flops> <bytes>
// <graph> is the graph's index in Model.graphs, or for a control-flow body
// <graph>/<node id>/<attribute name>[/<index>]; <op> is `domain::op` for opaque nodes;
// <output types> is `;`-joined DTYPE[d0,d1,...] with a dim as its size, its symbol's name,
// or `?` when unknown (DTYPE* when the rank is unknown, `-` when the value has no type);
// macs, flops (matmul + other) and bytes (read + written) come from the node's cost
// annotation, `-` when the file has none (write it with `irbridge analyze -o`).
// The sidecar `<file>.data` is only checked (present, large enough, inside the folder):
// costs and shapes do not need weight bytes, so shape-only files read the same way.
// Errors: one line on stderr, exit status 1.

#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/stat.h>

#include "irbridge/v1/irbridge.pb.h"

namespace {

namespace pb = irbridge::v1;

constexpr char kMagic[] = "\x89IRB\r\n\x1a\n";
constexpr int kNewestIrVersion = pb::IR_VERSION_2026_11_22;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure("cannot open the file");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string type_text(const pb::TensorType& t) {
  std::string text = pb::DataType_Name(t.dtype());
  if (!t.has_shape()) return text + "*";
  text += "[";
  for (int i = 0; i < t.shape().dims_size(); ++i) {
    const pb::Dim& d = t.shape().dims(i);
    if (i) text += ",";
    if (d.has_size()) {
      text += std::to_string(d.size());
    } else if (d.has_symbol()) {
      text += d.symbol().name();
    } else {
      text += "?";
    }
  }
  return text + "]";
}

class Printer {
 public:
  explicit Printer(std::ostream& out) : out_(out) {}

  // Prints every node of `graph` (and of its bodies); `types` holds the enclosing scopes.
  void graph(const pb::Graph& g, const std::string& label,
             std::map<std::string, const pb::TensorType*> types) {
    for (const pb::Value& v : g.inputs()) types[v.name()] = &v.type();
    for (const pb::Value& v : g.value_info()) types[v.name()] = &v.type();
    for (const pb::Node& node : g.nodes()) {
      ++count_;
      std::string op = node.domain().empty() ? node.op() : node.domain() + "::" + node.op();
      std::string outs;
      for (int i = 0; i < node.outputs_size(); ++i) {
        auto it = types.find(node.outputs(i));
        outs += (i ? ";" : "") + (it == types.end() ? std::string("-") : type_text(*it->second));
      }
      out_ << "node\t" << label << "\t" << node.id() << "\t" << op << "\t" << outs << "\t";
      if (node.has_annotations() && node.annotations().has_cost()) {
        const pb::Cost& c = node.annotations().cost();
        out_ << c.macs() << "\t" << c.matmul_flops() + c.other_flops() << "\t"
             << c.bytes_read() + c.bytes_written() << "\n";
      } else {
        out_ << "-\t-\t-\n";
      }
      for (const pb::Attribute& attr : node.attributes()) {
        std::string sub = label + "/" + std::to_string(node.id()) + "/" + attr.name();
        if (attr.has_graph()) graph(attr.graph(), sub, types);
        if (attr.has_graphs())
          for (int i = 0; i < attr.graphs().values_size(); ++i)
            graph(attr.graphs().values(i), sub + "/" + std::to_string(i), types);
      }
    }
  }

  int64_t count() const { return count_; }

 private:
  std::ostream& out_;
  int64_t count_ = 0;
};

// Checks that every external tensor lies inside an existing sidecar next to the model.
int64_t check_sidecars(const pb::Model& model, const std::string& path) {
  std::string folder = path.substr(0, path.find_last_of('/') + 1);
  int64_t external = 0;
  for (const pb::Tensor& t : model.tensors()) {
    if (!t.has_external()) continue;
    ++external;
    const pb::ExternalData& ext = t.external();
    const std::string& loc = ext.location();
    if (loc.empty() || loc.find('/') != std::string::npos || loc == "." || loc == "..")
      throw Failure("tensor " + t.name() + ": sidecar location '" + loc +
                    "' is outside the model's folder");
    struct stat st {};
    if (stat((folder + loc).c_str(), &st) != 0)
      throw Failure("tensor " + t.name() + ": sidecar " + loc + " is missing");
    if (static_cast<uint64_t>(st.st_size) < ext.offset() + ext.length())
      throw Failure("tensor " + t.name() + ": sidecar " + loc + " is truncated (" +
                    std::to_string(st.st_size) + " bytes, needs " +
                    std::to_string(ext.offset() + ext.length()) + ")");
  }
  return external;
}

int run(const std::string& path) {
  std::string bytes = read_file(path);
  if (bytes.size() < 8 || bytes.compare(0, 8, kMagic, 8) != 0)
    throw Failure("not an irbridge file (bad magic)");
  pb::Model model;
  if (!model.ParseFromArray(bytes.data() + 8, static_cast<int>(bytes.size() - 8)))
    throw Failure("corrupt file: the Model message does not parse");
  if (model.ir_version() > kNewestIrVersion)
    throw Failure("IR version " + std::to_string(model.ir_version()) +
                  " is newer than this reader (" + std::to_string(kNewestIrVersion) + ")");
  int64_t external = check_sidecars(model, path);
  int64_t shape_only = 0;
  for (const pb::Tensor& t : model.tensors())
    if (t.data_case() == pb::Tensor::DATA_NOT_SET) ++shape_only;
  std::ostringstream body;
  Printer printer(body);
  for (int g = 0; g < model.graphs_size(); ++g)
    printer.graph(model.graphs(g), std::to_string(g), {});
  std::cout << "model\t" << model.name() << "\tir_version\t" << model.ir_version()
            << "\tgraphs\t" << model.graphs_size() << "\tnodes\t" << printer.count()
            << "\ttensors\t" << model.tensors_size() << "\texternal\t" << external
            << "\tshape_only\t" << shape_only << "\n"
            << body.str();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  if (argc != 2) {
    std::cerr << "usage: irb_reader MODEL.irb\n";
    return 2;
  }
  try {
    return run(argv[1]);
  } catch (const Failure& e) {
    std::cerr << "irb_reader: " << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
}
