"""The ViT size the tests build (any family: transformers vision-config fields, random weights)."""

# hidden 32, 2 layers, 2 heads, patch 8 on 32 px: a few ms per forward
TINY_VIT = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "patch_size": 8,
    "image_size": 32,
}
