"""Keyed jagged features and pooled keyed outputs, as TorchRec names them
(torchrec.sparse.jagged_tensor.KeyedJaggedTensor and KeyedTensor), for
programs without torchrec.  ember.torch.EmbeddingBagCollection takes
TorchRec's own KeyedJaggedTensor as well (by duck typing: keys(),
values(), lengths() or offsets(), weights_or_none()).
"""
import torch


def _int_tensor(obj, arg):
    if not isinstance(obj, torch.Tensor):
        raise TypeError(f"{arg}: a tensor, got {type(obj).__name__}")
    if obj.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{arg}: int64 or int32, got {obj.dtype}")
    if obj.dim() != 1:
        raise ValueError(f"{arg}: 1-D, got shape {tuple(obj.shape)}")
    return obj


class KeyedJaggedTensor:
    """KeyedJaggedTensor(keys, values, weights=None, lengths=None,
    offsets=None, stride=None): per key (feature), stride() bags of ids,
    the values of key k before those of key k + 1; bag sizes by lengths
    ([keys x stride]) or offsets ([keys x stride + 1])."""

    def __init__(self, keys, values, weights=None, lengths=None, offsets=None, stride=None,
                 stride_per_key_per_rank=None, length_per_key=None, offset_per_key=None,
                 index_per_key=None, jt_dict=None, inverse_indices=None):
        keys = list(keys)
        if not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
            raise ValueError("keys: distinct strings")
        values = _int_tensor(values, "values")
        if (lengths is None) == (offsets is None):
            raise ValueError("lengths, offsets: give exactly one of them")
        if lengths is not None:
            lengths = _int_tensor(lengths, "lengths")
            bags = lengths.numel()
        else:
            offsets = _int_tensor(offsets, "offsets")
            if offsets.numel() < 1:
                raise ValueError("offsets: at least one offset (0)")
            bags = offsets.numel() - 1
        if keys and bags % len(keys):
            raise ValueError(f"{'lengths' if lengths is not None else 'offsets'}: {bags} bags "
                             f"are not a whole stride for {len(keys)} keys")
        computed = bags // len(keys) if keys else 0
        if stride is not None and keys and stride != computed:
            raise ValueError(f"stride: {stride}, but the bags make {computed}")
        if weights is not None:
            if not isinstance(weights, torch.Tensor) or not weights.is_floating_point():
                raise TypeError("weights: a float tensor")
            if weights.numel() != values.numel():
                raise ValueError(f"weights: {weights.numel()} for {values.numel()} values")
        self._keys, self._values, self._weights = keys, values, weights
        self._lengths, self._offsets = lengths, offsets
        self._stride = computed if keys else int(stride or 0)

    @classmethod
    def from_lengths_sync(cls, keys, values, lengths, weights=None, stride=None):
        return cls(keys, values, weights=weights, lengths=lengths, stride=stride)

    @classmethod
    def from_offsets_sync(cls, keys, values, offsets, weights=None, stride=None):
        return cls(keys, values, weights=weights, offsets=offsets, stride=stride)

    def keys(self):
        return self._keys

    def values(self):
        return self._values

    def weights(self):
        if self._weights is None:
            raise ValueError("weights: this KeyedJaggedTensor has none")
        return self._weights

    def weights_or_none(self):
        return self._weights

    def lengths(self):
        if self._lengths is None:
            self._lengths = (self._offsets[1:] - self._offsets[:-1]).to(torch.int32)
        return self._lengths

    def lengths_or_none(self):
        return self._lengths

    def offsets(self):
        if self._offsets is None:
            o = torch.zeros(self._lengths.numel() + 1, dtype=torch.int64)
            torch.cumsum(self._lengths, 0, out=o[1:])
            self._offsets = o
        return self._offsets

    def offsets_or_none(self):
        return self._offsets

    def stride(self):
        return self._stride

    def length_per_key(self):
        return [int(x) for x in self.lengths().view(len(self._keys), -1).sum(1)]

    def __repr__(self):
        return (f"KeyedJaggedTensor(keys={self._keys}, stride={self._stride}, "
                f"values={self._values.numel()})")


class KeyedTensor:
    """A pooled output per key (TorchRec's KeyedTensor): keys(),
    values() [B, sum of dims] (the keys' outputs side by side), to_dict()
    {key: [B, dim]}, length_per_key(), offset_per_key()."""

    def __init__(self, keys, length_per_key, values=None, key_dim=1, _parts=None):
        self._keys = list(keys)
        self._lengths = list(length_per_key)
        if len(self._keys) != len(self._lengths):
            raise ValueError("length_per_key: one per key")
        if key_dim != 1:
            raise ValueError("key_dim: 1 (the keys side by side in dim 1)")
        self._values = values
        self._parts = _parts  # [B, dim] per key, views of the pooled output
        if values is None and _parts is None:
            raise ValueError("values: required")

    def keys(self):
        return self._keys

    def key_dim(self):
        return 1

    def length_per_key(self):
        return self._lengths

    def offset_per_key(self):
        out = [0]
        for n in self._lengths:
            out.append(out[-1] + n)
        return out

    def values(self):
        if self._values is None:
            self._values = torch.cat(self._parts, dim=1)
        return self._values

    def to_dict(self):
        if self._parts is not None:
            return dict(zip(self._keys, self._parts))
        return dict(zip(self._keys, torch.split(self._values, self._lengths, dim=1)))

    def __getitem__(self, key):
        try:
            i = self._keys.index(key)
        except ValueError:
            raise KeyError(f"key: {key!r} is not among {self._keys}") from None
        if self._parts is not None:
            return self._parts[i]
        o = self.offset_per_key()
        return self._values[:, o[i]:o[i + 1]]

    def __repr__(self):
        return f"KeyedTensor(keys={self._keys}, length_per_key={self._lengths})"
