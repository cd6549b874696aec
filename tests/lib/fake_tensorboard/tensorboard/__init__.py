"""A stand-in for the tensorboard package, for tests/observe/metrics-to-tensorboard.sh where
tensorboard is not installed (as fake_gpu.c stands in for CUDA): the few names
scripts/metrics-to-tensorboard imports, and an EventFileWriter that writes its events
as JSON Lines (wall_time, step, values: tag and simple_value or text) into
LOGDIR/events.out.tfevents.fake. FAKE_TENSORBOARD_FAIL_AFTER=N: the writer's N+1st
event fails with ENOSPC, as a full disk would. Not tensorboard's API beyond that."""
import errno
import json
import os
import sys
import types


class _Message:
    """A protobuf message: its fields are the keyword arguments it was made with."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class Event(_Message):
    pass


class SummaryMetadata(_Message):
    class PluginData(_Message):
        pass


class Summary(_Message):
    class Value(_Message):
        pass


class TensorProto(_Message):
    pass


class TensorShapeProto(_Message):
    class Dim(_Message):
        pass


class EventFileWriter:
    def __init__(self, logdir):
        self._path = os.path.join(logdir, "events.out.tfevents.fake")
        self._f = open(self._path, "x", encoding="utf-8")
        self._left = int(os.environ.get("FAKE_TENSORBOARD_FAIL_AFTER", "-1"))

    def add_event(self, event):
        if self._left == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)
        self._left -= 1
        values = []
        for v in event.summary.value:
            if hasattr(v, "simple_value"):
                values.append({"tag": v.tag, "simple_value": v.simple_value})
            else:
                values.append({"tag": v.tag, "text": v.tensor.string_val[0].decode()})
        self._f.write(json.dumps({"wall_time": event.wall_time, "step": event.step, "values": values}) + "\n")

    def flush(self):
        self._f.flush()

    def close(self):
        self._f.close()


# The modules the converter imports from, each holding its names.
for _name, _attrs in {
        "compat": {}, "compat.proto": {},
        "compat.proto.event_pb2": {"Event": Event},
        "compat.proto.summary_pb2": {"Summary": Summary, "SummaryMetadata": SummaryMetadata},
        "compat.proto.tensor_pb2": {"TensorProto": TensorProto},
        "compat.proto.tensor_shape_pb2": {"TensorShapeProto": TensorShapeProto},
        "summary": {}, "summary.writer": {},
        "summary.writer.event_file_writer": {"EventFileWriter": EventFileWriter}}.items():
    _m = types.ModuleType(f"{__name__}.{_name}")
    _m.__dict__.update(_attrs)
    sys.modules[_m.__name__] = _m
    _parent, _, _child = _m.__name__.rpartition(".")
    setattr(sys.modules[_parent], _child, _m)
