"""The Traffic page's node matrix shows the decode instance's expert all-to-all beside prefill's."""
import numpy as np

from twin.engine import Engine
from twin.ui import figures as F


def test_log_matrix_draws_every_decode_node_pair_and_the_prefill_blocks():
    """Default run, 30 s: the decode instance (160 NPUs on 20 nodes) at batch ~0.4 per NPU moves
    ~0.1 GB/s between each pair of its nodes, a prefill instance tens of GB/s inside its 2 nodes:
    on a linear scale the decode block is invisible, on the log scale (10^-3..10^3) every pair of
    the decode block has a colour and the hover text gives the GB/s."""
    eng = Engine("default", seed=0)
    snap = eng.advance(30)
    z, text = F.heatmap_z(snap.node_traffic)
    dec = np.asarray(eng.decode[0].nodes)
    assert len(dec) == 20
    block = np.array([[z[i][j] for j in dec] for i in dec], dtype=float)
    assert not np.isnan(block).any() and -2 < np.nanmax(block) < 0       # 0.01 to 1 GB/s a pair
    assert max(v for row in z for v in row if v is not None) > 1         # a prefill block above 10 GB/s
    i, j = dec[0], dec[1]
    assert text[i][j] == f"{snap.node_traffic[i][j]:.3g}" and z[i][j] == round(np.log10(snap.node_traffic[i][j]), 2)
    assert text[0][47] == "" and z[0][47] is None                          # nothing between n00 and n47
