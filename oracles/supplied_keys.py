"""Keys every real config.json of a type has and transformers' own default config of that type
lacks, so that transformers cannot build a model from its default (the structure oracle and the
axolotl-examples oracle would otherwise have nothing to hold hookstream to). Each value comes from
transformers itself, never typed in here:

  "own:KEY.PATH"   another key of the same default config;
  "type:OTHER"     the key as transformers' default config of OTHER derives it for the same
                   num_hidden_layers.

A case built this way is "the default config + KEY", and is named so wherever it is reported.
"""
from transformers import AutoConfig

SUPPLIED = {
    # DbrxAttention.__init__ reads attn_config.rope_theta, which transformers 5.17's
    # DbrxAttentionConfig no longer declares (AttributeError on the default config); real DBRX
    # config.json files carry attn_config.rope_theta. The value: the default's own
    # rope_parameters["rope_theta"], which DbrxRotaryEmbedding reads.
    "dbrx": {"keys": {"attn_config.rope_theta": "own:rope_parameters.rope_theta"},
             # DbrxFFNConfig.__post_init__ raises "Found unknown kwargs" on the generic
             # PreTrainedConfig keys (_name_or_path, output_attentions) that to_dict() writes into
             # ffn_config, so transformers cannot read back a default it wrote; real config.json
             # files hold ffn_config's own fields only.
             "own_fields_only": ["ffn_config"]},
    # Lfm2MoeDecoderLayer indexes config.layer_types, which Lfm2MoeConfig does not default
    # (TypeError on the default config); every LFM2 config.json lists its layers. The value: what
    # transformers' Lfm2Config (the dense LFM2, whose layers Lfm2Moe's copy) derives without
    # full_attn_idxs: every layer full_attention. The real models' conv layers are not in such a case.
    "lfm2_moe": {"keys": {"layer_types": "type:lfm2"}},
}


def supply(config, model_type):
    """Sets the supplied keys of `model_type` on `config` (a transformers config object); returns
    their names ([] when the type has none)."""
    entry = SUPPLIED.get(model_type)
    if entry is None:
        return []
    added = []
    for key, source in entry["keys"].items():
        kind, _, name = source.partition(":")
        if kind == "own":
            value = config
            for part in name.split("."):
                value = value[part] if isinstance(value, dict) else getattr(value, part)
        elif kind == "type":
            value = getattr(AutoConfig.for_model(name, num_hidden_layers=config.num_hidden_layers), key)
        else:
            raise ValueError(f"supplied key {key}: expected \"own:KEY\" or \"type:MODEL_TYPE\", got {source!r}")
        holder, _, leaf = key.rpartition(".")
        target = config
        for part in filter(None, holder.split(".")):
            target = getattr(target, part)
        setattr(target, leaf, value)
        added.append(key)
    return added


def config_dict(config, model_type):
    """config.to_dict() with the sub-configs the type writes with their own fields only."""
    written = config.to_dict()
    for sub in SUPPLIED.get(model_type, {}).get("own_fields_only", []):
        own = set(vars(type(getattr(config, sub))).get("__annotations__", {}))
        written[sub] = {key: value for key, value in written[sub].items() if key in own}
    return written
