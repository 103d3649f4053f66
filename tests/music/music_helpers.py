"""Helpers shared by the music tests (a module with a unique name: tests/ is not a package)."""

from __future__ import annotations


def make_score(voices, *, time_signatures=None, fermatas=()):
    """A small music21 score built measure by measure (a first bar shorter than its signature is a pickup).

    Args:
        voices: per part, a list of bars, each a list of ``(midi pitch or None for rest, quarter length)``.
        time_signatures: ``{bar index: "3/4"}`` (default 4/4 at bar 0).
        fermatas: ``(part, bar, note index)`` of notes that carry a fermata.
    """
    from music21 import expressions, meter, note, stream

    time_signatures = time_signatures or {0: "4/4"}
    score = stream.Score()
    for v, bars in enumerate(voices):
        part = stream.Part()
        for b, bar in enumerate(bars):
            measure = stream.Measure(number=b)
            if b in time_signatures:
                measure.insert(0, meter.TimeSignature(time_signatures[b]))
            for i, (pitch, length) in enumerate(bar):
                element = note.Rest(quarterLength=length) if pitch is None else note.Note(pitch, quarterLength=length)
                if (v, b, i) in fermatas:
                    element.expressions.append(expressions.Fermata())
                measure.append(element)
            part.append(measure)
        score.insert(0, part)
    return score
