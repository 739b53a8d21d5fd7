"""What an agent's tool calls did: the tool vocabulary (``vocabulary``) and the shell parser
(``shell``), shared by the artifact ledger, the offline writer, the informative stubs and the
importers. Pure functions over plain data; imports nothing of the engine or the writers."""
