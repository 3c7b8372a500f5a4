"""Model Explorer (`ai-edge-model-explorer`) output: the graph as its JSON graph format, with
layers from module paths, and node-data overlays (estimated latency, FLOPs, roofline bound).

Public API:

* `write(model, path, hardware=NAME) -> Path`: `path` ending in .json writes the graph there
  and `<stem>.latency.json`, `<stem>.flops.json`, `<stem>.bound.json` beside it; any other
  path is a folder holding `<model>.json` and the three overlays. All or nothing.
* `output_files(path, model_name)`: where `write` puts each file.
* `graph_collection(view)`, `node_data(view, overlay)`: the JSON objects, from an
  `irbridge.graphview.View`.

Open with `model-explorer resnet18.json --node_data_paths=resnet18.latency.json,...`.
See docs/viewers.md.
"""

from irbridge.converters.modelexplorer.writer import (
    BOUND_VALUES,
    OVERLAYS,
    graph_collection,
    namespace_of,
    node_data,
    node_id,
    output_files,
    render,
    write,
)

__all__ = ["BOUND_VALUES", "OVERLAYS", "graph_collection", "namespace_of", "node_data",
           "node_id", "output_files", "render", "write"]
