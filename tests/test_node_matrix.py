"""The Traffic page's node matrix shows the decode instance's expert all-to-all beside prefill's."""
import numpy as np

from twin.engine import Engine
from twin.ui import figures


def test_log_matrix_draws_every_decode_node_pair_and_the_prefill_blocks():
    """Default run, 30 s: the decode instance (160 NPUs on 20 nodes), still filling at batch ~14 per
    NPU, moves ~4 GB/s between each pair of its nodes, a prefill instance over 100 GB/s inside its
    2 nodes: on the log scale (10^-3..10^3) every pair of the decode block has a colour and the hover
    text gives the GB/s. (The Mooncake loop this default replaced kept decode near batch 0.4, ~0.1 GB/s
    a pair: the block was invisible on a linear scale.)"""
    eng = Engine("default", seed=0)
    eng.advance(30)
    snap = eng.snapshot()
    z, text = figures.heatmap_z(snap.node_traffic)
    dec = np.asarray(eng.decode[0].nodes)
    assert len(dec) == 20
    block = np.array([[z[i][j] for j in dec] for i in dec], dtype=float)
    assert not np.isnan(block).any() and 0 < np.nanmin(block) and np.nanmax(block) < 1.5   # 1 to 30 GB/s a pair
    assert max(v for row in z for v in row if v is not None) > 2         # a prefill block above 100 GB/s
    i, j = dec[0], dec[1]
    assert text[i][j] == f"{snap.node_traffic[i][j]:.3g}" and z[i][j] == round(np.log10(snap.node_traffic[i][j]), 2)
    assert text[0][47] == "" and z[0][47] is None                          # nothing between n00 and n47
