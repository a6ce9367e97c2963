"""pix2pix (Isola et al., 2017) built on the framework's GANTask: networks and paired datasets.

`custom_imports: [projects.pix2pix]` registers UNetGenerator, ResnetGenerator, LabelMapGenerator,
PatchGANDiscriminator, AlignedPairs, FolderPairs and SyntheticPairs.
"""

from projects.pix2pix import datasets, models  # noqa: F401
