"""The probe registry: probe name -> Probe class. Adding a probe = one module + one line here.

Every probe follows :class:`probes.base.Probe`; ``python -m mtl_heads probe probes=dep,pos,...``
looks them up here.
"""
from probes.attention import DepProbe, SrlProbe
from probes.clark import ClarkProbe
from probes.clustering import ConProbe, NerProbe, PosProbe
from probes.sink import SinkProbe
from probes.voita import VoitaProbe

PROBES = {
    DepProbe.name: DepProbe,
    SrlProbe.name: SrlProbe,
    PosProbe.name: PosProbe,
    NerProbe.name: NerProbe,
    ConProbe.name: ConProbe,
    ClarkProbe.name: ClarkProbe,
    VoitaProbe.name: VoitaProbe,
    SinkProbe.name: SinkProbe,  # added by ``python -m mtl_heads probe`` to every report that captures attention maps
}
# probes.samples.AttentionSamples ("attention-samples") is added the same way (mtl_heads.analysis.probing.ADDED) but is
# not registered here: it keeps a few sentences' attention in a file of its own, no per-head table to rank.

# Probes that need a trained run (gradients and ablations through its decoders).
from probes.importance import Ablation, Importance  # noqa: E402

PROBES.update({Importance.name: Importance, Ablation.name: Ablation})
