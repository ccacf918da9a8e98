"""The optional parts of the agents, kept beside the algorithms and entered at the few places they mark: action and
agent masks (``# masks``), recurrent models (``# recurrent``) and the compiled path (``# compiled``)."""
