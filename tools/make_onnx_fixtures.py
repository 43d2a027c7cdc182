"""Small ONNX files for the reader's unit tests and fuzz seeds, written with the `onnx` package
(the reference encoder of the format): tests/fixtures/onnx/tiny.onnx (a Conv node with raw_data,
float_data and int64_data initializers) and bad_size.onnx (a tensor whose data is short of its
dims).

    PYTHONPATH=<dir with onnx> python tools/make_onnx_fixtures.py
"""
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "onnx"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5) / 8, "conv.weight")
    b = helper.make_tensor("conv.bias", TensorProto.FLOAT, [2], [0.5, -1.25])  # float_data
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1, -1, 7])  # int64_data
    conv = helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["y"], name="/enc/conv/Conv",
                            dilations=[2], pads=[4, 4], kernel_shape=[5], group=1, strides=[1])
    resh = helper.make_node("Reshape", ["y", "shape"], ["z"], name="/enc/Reshape")
    g = helper.make_graph([conv, resh], "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 7])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [w, b, shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)], producer_name="saragossa-fixture")
    m.ir_version = 8
    onnx.save(m, OUT / "tiny.onnx")
    bad = helper.make_tensor("short", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    bad.dims[0] = 5
    g2 = helper.make_graph([], "bad", [], [], [bad])
    onnx.save(helper.make_model(g2), OUT / "bad_size.onnx")


if __name__ == "__main__":
    main()
