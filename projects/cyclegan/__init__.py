"""CycleGAN (Zhu et al., 2017) built on the framework's CycleGANTask and UnpairedImageFolders.

`custom_imports: [projects.pix2pix, projects.cyclegan]` registers the networks (ResnetGenerator,
PatchGANDiscriminator, from pix2pix) and TwoStyleShapes, the built-in synthetic unpaired data.
"""

from projects.cyclegan import datasets  # noqa: F401
