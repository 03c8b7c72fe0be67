"""Reads what write_sample writes with TensorBoard's own readers (PyPI
`tensorboard`): the record reader (checks every length and CRC), the
EventAccumulator (scalars, histograms, text) and the plugin accumulator that
the TensorBoard server uses.

    read_events.py WRITE_SAMPLE_BINARY

Exits 77 (ctest's skip code) when the tensorboard package cannot be imported.
"""
import bisect
import math
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
    from tensorboard.util import tensor_util
except ImportError as e:
    print(f"SKIP: TensorBoard's reader is not installed ({e}); scripts/setup.sh installs it")
    sys.exit(77)

FILE_NAME = re.compile(r"^events\.out\.tfevents\.\d+\.[^/]+\.\d+\.\d+$")
DBL_MAX = sys.float_info.max
f32 = lambda x: float(np.float32(x))


def require(cond, what):  # not assert: python -O would skip it
    if not cond:
        raise SystemExit(f"mismatch: {what}")


def event_file(run_dir):
    names = [n for n in os.listdir(run_dir) if n.startswith("events.out.tfevents.")]
    require(len(names) == 1 and FILE_NAME.match(names[0]), (run_dir, os.listdir(run_dir)))
    return os.path.join(run_dir, names[0])


def read_all_records(path):
    """Every event in the file; a bad length or CRC raises DataLossError."""
    reader = PyRecordReader_New(path)
    events = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return events
        events.append(event_pb2.Event.FromString(reader.record()))


def check_framing(path, n_summaries):
    events = read_all_records(path)
    require(events[0].file_version == "brain.Event:2", events[0])
    require(len(events) == 1 + n_summaries, (path, len(events)))


def check_scalars(acc):
    loss = acc.Scalars("loss/train")
    require([s.step for s in loss] == list(range(40)), [s.step for s in loss])
    require([s.value for s in loss] == [1.0 / (1 << (i % 8)) for i in range(40)], loss)
    lr = acc.Scalars("lr")
    require([s.step for s in lr] == [0, 1, 2], lr)
    require(lr[0].value == f32(0.001) and lr[0].wall_time == 1234567890.5, lr[0])
    require(math.isnan(lr[1].value) and lr[2].value == -math.inf, lr)


def tf_bucket_limits():
    pos = []
    v = 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    return [-DBL_MAX] + [-x for x in reversed(pos)] + [0.0] + pos + [DBL_MAX]


def check_histogram(h, values):
    """Summary statistics, and each bucket's count against the values it covers."""
    limits, counts = list(h.bucket_limit), list(h.bucket)
    require(len(limits) == len(counts) and limits == sorted(set(limits)), limits)
    require(limits[-1] == DBL_MAX and set(limits) <= set(tf_bucket_limits()), limits[-3:])
    require(sum(counts) == h.num, (sum(counts), h.num))
    if values is None:
        return
    require((h.min, h.max, h.num) == (min(values), max(values), len(values)), h)
    require(math.isclose(h.sum, sum(values), rel_tol=1e-12), (h.sum, sum(values)))
    sq = sum(v * v for v in values)
    require(math.isclose(h.sum_squares, sq, rel_tol=1e-12), (h.sum_squares, sq))
    for i, (limit, count) in enumerate(zip(limits, counts)):
        lower = limits[i - 1] if i else -math.inf
        require(count == sum(lower <= v < limit for v in values), (i, lower, limit, count))
    # Each value's own TensorFlow bucket: the edges of a value's bucket survive
    # the merging of empty runs, so the value lies right below its bucket limit.
    tf = tf_bucket_limits()
    for v in values:
        require(tf[bisect.bisect_right(tf, v)] in limits, v)


def check_histograms(acc):
    (w,) = acc.Histograms("weights")
    require(w.step == 7, w.step)
    check_histogram(w.histogram_value, [-2, -1, 0, 0, 0.5, 1, 3, 1e-13, -1e30])
    (a,) = acc.Histograms("activations")
    check_histogram(a.histogram_value, None)
    av = a.histogram_value
    require(av.num == 1000 and av.min < -2 and av.max > 2 and abs(av.sum) < 150, av)
    (i,) = acc.Histograms("ints")
    check_histogram(i.histogram_value, list(range(10)))


def check_text(acc):
    notes = acc.Tensors("notes")
    require([t.step for t in notes] == [2, 5], notes)
    texts = [tensor_util.make_ndarray(t.tensor_proto).tolist() for t in notes]
    require(texts == [[b"hello **kiln** caf\xc3\xa9"], [b"second"]], texts)
    require(acc.PluginTagToContent("text") == {"notes": b""}, acc.PluginTagToContent("text"))


def check_sub_runs(root):
    expected = {"train": [(3, 0.75), (4, 0.875)], "test": [(3, 0.5), (4, 0.625)]}
    for tag, points in expected.items():
        run = os.path.join(root, "acc_epoch_" + tag)
        check_framing(event_file(run), 2)
        acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0})
        acc.Reload()
        require(acc.Tags()["scalars"] == ["acc/epoch"], acc.Tags())
        got = [(s.step, s.value) for s in acc.Scalars("acc/epoch")]
        require(got == points, (tag, got))


def check_plugin_view(root):
    """What the TensorBoard server sees, after its legacy-to-plugin migration."""
    acc = pea.EventAccumulator(root, size_guidance={pea.TENSORS: 0})
    acc.Reload()
    require(set(acc.PluginTagToContent("scalars")) == {"loss/train", "lr"}, acc.PluginAssets)
    require(set(acc.PluginTagToContent("histograms")) == {"weights", "activations", "ints"},
            acc.PluginTagToContent("histograms"))
    require(set(acc.PluginTagToContent("text")) == {"notes"}, acc.PluginTagToContent("text"))
    loss = [float(tensor_util.make_ndarray(t.tensor_proto)) for t in acc.Tensors("loss/train")]
    require(loss == [1.0 / (1 << (i % 8)) for i in range(40)], loss)


def main():
    with tempfile.TemporaryDirectory() as root:
        subprocess.run([sys.argv[1], root], check=True, timeout=120)
        require(sorted(os.listdir(root))[:2] == ["acc_epoch_test", "acc_epoch_train"],
                os.listdir(root))
        check_framing(event_file(root), 40 + 3 + 3 + 2)
        acc = ea.EventAccumulator(
            root, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.TENSORS: 0})
        acc.Reload()
        tags = acc.Tags()
        require(sorted(tags["scalars"]) == ["loss/train", "lr"], tags)
        require(sorted(tags["histograms"]) == ["activations", "ints", "weights"], tags)
        require(tags["tensors"] == ["notes"], tags)
        check_scalars(acc)
        check_histograms(acc)
        check_text(acc)
        check_sub_runs(root)
        check_plugin_view(root)
    print("OK: TensorBoard read the scalars, histograms and text kiln wrote")


if __name__ == "__main__":
    main()
