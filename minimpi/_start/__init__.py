"""The start script of a rank whose program's directory holds another ``minimpi``
(see :mod:`minimpi._start.minimpi_rank`)."""
