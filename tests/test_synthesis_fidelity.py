"""The synthesis recipe against the official OASIS / SPADE / MSGAN code (docs/semantic-synthesis.md,
"Fidelity to the official code"): what a loss that reads labels refuses, the mode-seeking term's
two forms and its bound, fresh noise for the generator's step, and the EMA generator's BatchNorm
statistics re-estimated before it is evaluated, saved or exported. KID and FID's rounding:
tests/test_kid.py."""

import pytest
from test_synthesis_task import CLASSES, generator, patch_discriminator, segmenter_discriminator

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError
from framework.models.diff_augment import DiffAugment
from framework.registry import TASKS


@pytest.mark.parametrize("extra, message", [
    ({"d_augment": DiffAugment(adaptive=True)},
     r"d_augment: a loss that reads labels \(gan_loss: oasis\) scores D's pixels against the label map"),
    ({"d_augment": DiffAugment(p=1.0)}, "which d_augment's transforms would move away from the image"),
    ({"r1_weight": 1.0}, r"r1_weight: R1 penalises the gradient of D's mean logit, which a loss that reads labels"),
])
def test_a_loss_that_reads_labels_refuses_augmentation_and_r1_in_one_line(extra, message):
    node = {"type": "SemanticSynthesisTask", "generator": generator(), "discriminator": segmenter_discriminator(),
            "num_classes": CLASSES, "gan_loss": "oasis", **extra}
    with pytest.raises(ConfigError, match=message):
        TASKS.build(node, path="task")
    node.update(gan_loss="hinge", discriminator=patch_discriminator())  # a loss of the logits alone takes them
    TASKS.build(node, path="task")
