"""The BBC News corpus (Greene & Cunningham 2006, :mod:`.data`): topic classification (``bbc-topic``,
:mod:`.topic`) and headline generation (``bbc-headline``, :mod:`.headline`)."""
