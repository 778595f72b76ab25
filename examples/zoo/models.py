"""The zoo's PyTorch modules, written as their sources write them (plain torch.nn, small sizes).

Each class copies the structure, the attribute names (so the state_dict keys) and the forward of
its source, with smaller widths and depths; the comment above each says which source and what
was made smaller. reference.py loads make_weights.py's weights into them (strict) and writes the
expected outputs. Only reference.py imports this file: the test does not need torch.

  MobileNetV2          torchvision.models.mobilenetv2 (MobileNetV2, InvertedResidual,
                       Conv2dNormActivation = torchvision.ops.misc)
  EfficientNet         torchvision.models.efficientnet (EfficientNet, MBConv,
                       SqueezeExcitation = torchvision.ops.misc), B0's block kinds
  VisionTransformer    torchvision.models.vision_transformer (VisionTransformer, Encoder,
                       EncoderBlock, MLPBlock), vit_b_16's layout
  BertModel            transformers.models.bert.modeling_bert (BertEmbeddings, BertSelfAttention
                       eager path, BertSelfOutput, BertIntermediate, BertOutput, BertPooler)
  UNet                 milesial/Pytorch-UNet unet/unet_parts.py (DoubleConv, Down, Up, OutConv)
  LlamaDecoderLayer    transformers.models.llama.modeling_llama (LlamaRMSNorm,
                       LlamaRotaryEmbedding, apply_rotary_pos_emb, repeat_kv,
                       LlamaAttention eager path, LlamaMLP, LlamaDecoderLayer)
  ConvNeXt             torchvision.models.convnext (ConvNeXt, CNBlock, LayerNorm2d, Permute)
  SwinStage            torchvision.models.swin_transformer (SwinTransformerBlock,
                       ShiftedWindowAttention, shifted_window_attention), two blocks
  GPT2LMHeadModel      transformers.models.gpt2.modeling_gpt2 (Conv1D, GPT2Attention eager path,
                       GPT2MLP with NewGELUActivation, GPT2Block, GPT2Model, tied lm_head)
  DistilBertModel      transformers.models.distilbert.modeling_distilbert (Embeddings,
                       MultiHeadSelfAttention, FFN, TransformerBlock, Transformer)
  WhisperEncoder       transformers.models.whisper.modeling_whisper (sinusoids, WhisperAttention
                       eager path, WhisperEncoderLayer, WhisperEncoder)
  DenseNet             torchvision.models.densenet (_DenseLayer, _DenseBlock, _Transition)
  SqueezeNet           torchvision.models.squeezenet (Fire, SqueezeNet 1.1)
"""
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

# --------------------------------------------------------------------------- torchvision.ops.misc


class Conv2dNormActivation(nn.Sequential):
    """Conv2d, BatchNorm2d, activation (torchvision.ops.misc.Conv2dNormActivation): keys 0.*, 1.*"""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, groups=1,
                 norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU):
        padding = (kernel_size - 1) // 2
        layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding,
                            groups=groups, bias=norm_layer is None)]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            layers.append(activation_layer(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision.ops.misc.SqueezeExcitation: avgpool, fc1, activation, fc2, sigmoid, scale."""

    def __init__(self, input_channels, squeeze_channels, activation=nn.ReLU,
                 scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def _scale(self, input):
        scale = self.avgpool(input)
        scale = self.fc1(scale)
        scale = self.activation(scale)
        scale = self.fc2(scale)
        return self.scale_activation(scale)

    def forward(self, input):
        scale = self._scale(input)
        return scale * input


def _make_divisible(v, divisor, min_value=None):
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


# --------------------------------------------------------------------------- MobileNetV2
# torchvision's MobileNetV2 with a shorter inverted_residual_setting, last_channel 64, 10
# classes, on 32x32 images. Every op of the full model is here: stride-2 stem, t=1 and t=6
# inverted residuals (expand 1x1, depthwise 3x3, linear 1x1 projection), the residual when
# stride 1 and in == out, ReLU6, BatchNorm2d, the 1x1 head conv, avgpool, dropout, linear.

MOBILENETV2_SETTING = [
    # t, c, n, s
    [1, 16, 1, 1],
    [6, 24, 2, 2],
    [6, 32, 2, 2],
]


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio, norm_layer=nn.BatchNorm2d):
        super().__init__()
        self.stride = stride
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = self.stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            # pw
            layers.append(Conv2dNormActivation(inp, hidden_dim, kernel_size=1,
                                               norm_layer=norm_layer, activation_layer=nn.ReLU6))
        layers.extend([
            # dw
            Conv2dNormActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim,
                                 norm_layer=norm_layer, activation_layer=nn.ReLU6),
            # pw-linear
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            norm_layer(oup),
        ])
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=10, width_mult=1.0, inverted_residual_setting=None,
                 round_nearest=8, last_channel=64, dropout=0.2):
        super().__init__()
        block = InvertedResidual
        norm_layer = nn.BatchNorm2d
        input_channel = 32
        if inverted_residual_setting is None:
            inverted_residual_setting = MOBILENETV2_SETTING
        input_channel = _make_divisible(input_channel * width_mult, round_nearest)
        self.last_channel = _make_divisible(last_channel * max(1.0, width_mult), round_nearest)
        features = [Conv2dNormActivation(3, input_channel, stride=2, norm_layer=norm_layer,
                                         activation_layer=nn.ReLU6)]
        for t, c, n, s in inverted_residual_setting:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                stride = s if i == 0 else 1
                features.append(block(input_channel, output_channel, stride, expand_ratio=t,
                                      norm_layer=norm_layer))
                input_channel = output_channel
        features.append(Conv2dNormActivation(input_channel, self.last_channel, kernel_size=1,
                                             norm_layer=norm_layer, activation_layer=nn.ReLU6))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout),
                                        nn.Linear(self.last_channel, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x


# --------------------------------------------------------------------------- EfficientNet
# torchvision's EfficientNet (v1, B0's MBConv) with three stages instead of seven: t=1 k3,
# t=6 k3 stride 2 (two layers, so one has the residual), t=6 k5 stride 2; widths 16, 8, 16,
# 24, head 4*24 = 96, 10 classes, 32x32 images. Ops: SiLU, depthwise 3x3 and 5x5 convs,
# squeeze-excitation (avgpool, 1x1 convs with bias, SiLU, sigmoid gate), BatchNorm2d (eps
# 1e-5 as B0's), stochastic depth (identity in eval), dropout, linear.

EFFICIENTNET_SETTING = [
    # expand_ratio, kernel, stride, input_channels, out_channels, num_layers
    (1, 3, 1, 16, 8, 1),
    (6, 3, 2, 8, 16, 2),
    (6, 5, 2, 16, 24, 1),
]


class StochasticDepth(nn.Module):
    """torchvision.ops.StochasticDepth: the identity in eval mode."""

    def __init__(self, p, mode):
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, input):
        return input


class MBConv(nn.Module):
    def __init__(self, expand_ratio, kernel, stride, input_channels, out_channels,
                 stochastic_depth_prob, norm_layer, se_layer=SqueezeExcitation):
        super().__init__()
        self.use_res_connect = stride == 1 and input_channels == out_channels
        layers = []
        activation_layer = nn.SiLU
        expanded_channels = _make_divisible(input_channels * expand_ratio, 8)
        if expanded_channels != input_channels:
            layers.append(Conv2dNormActivation(input_channels, expanded_channels, kernel_size=1,
                                               norm_layer=norm_layer,
                                               activation_layer=activation_layer))
        layers.append(Conv2dNormActivation(expanded_channels, expanded_channels,
                                           kernel_size=kernel, stride=stride,
                                           groups=expanded_channels, norm_layer=norm_layer,
                                           activation_layer=activation_layer))
        squeeze_channels = max(1, input_channels // 4)
        layers.append(se_layer(expanded_channels, squeeze_channels,
                               activation=partial_silu))
        layers.append(Conv2dNormActivation(expanded_channels, out_channels, kernel_size=1,
                                           norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = out_channels

    def forward(self, input):
        result = self.block(input)
        if self.use_res_connect:
            result = self.stochastic_depth(result)
            result += input
        return result


def partial_silu():
    """functools.partial(nn.SiLU, inplace=True) in torchvision."""
    return nn.SiLU(inplace=True)


class EfficientNet(nn.Module):
    def __init__(self, setting=None, dropout=0.2, stochastic_depth_prob=0.2, num_classes=10):
        super().__init__()
        setting = setting or EFFICIENTNET_SETTING
        norm_layer = nn.BatchNorm2d
        layers = []
        firstconv_output_channels = setting[0][3]
        layers.append(Conv2dNormActivation(3, firstconv_output_channels, kernel_size=3, stride=2,
                                           norm_layer=norm_layer, activation_layer=nn.SiLU))
        total_stage_blocks = sum(cnf[5] for cnf in setting)
        stage_block_id = 0
        for expand_ratio, kernel, stride, input_channels, out_channels, num_layers in setting:
            stage = []
            for i in range(num_layers):
                sd_prob = stochastic_depth_prob * float(stage_block_id) / total_stage_blocks
                stage.append(MBConv(expand_ratio, kernel, stride if i == 0 else 1,
                                    input_channels if i == 0 else out_channels, out_channels,
                                    sd_prob, norm_layer))
                stage_block_id += 1
            layers.append(nn.Sequential(*stage))
        lastconv_input_channels = setting[-1][4]
        lastconv_output_channels = 4 * lastconv_input_channels
        layers.append(Conv2dNormActivation(lastconv_input_channels, lastconv_output_channels,
                                           kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True),
                                        nn.Linear(lastconv_output_channels, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x


# --------------------------------------------------------------------------- VisionTransformer
# torchvision's VisionTransformer (vit_b_16's layout: conv_proj patch embedding, class token,
# learned pos_embedding, pre-norm EncoderBlocks with nn.MultiheadAttention, GELU MLPBlock,
# LayerNorm eps 1e-6, heads.head on the class token) at image 32, patch 8 (16 patches + the
# class token = 17 positions), 2 layers, hidden 32, 4 heads, MLP 64, 10 classes.


class MLPBlock(nn.Sequential):
    """torchvision.models.vision_transformer.MLPBlock (torchvision.ops.MLP): keys 0.*, 3.*"""

    def __init__(self, in_dim, mlp_dim, dropout):
        super().__init__(nn.Linear(in_dim, mlp_dim), nn.GELU(), nn.Dropout(dropout),
                         nn.Linear(mlp_dim, in_dim), nn.Dropout(dropout))


class EncoderBlock(nn.Module):
    def __init__(self, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                 norm_layer=None):
        super().__init__()
        self.num_heads = num_heads
        self.ln_1 = norm_layer(hidden_dim)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads,
                                                    dropout=attention_dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = norm_layer(hidden_dim)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, input):
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x)
        x = x + input
        y = self.ln_2(x)
        y = self.mlp(y)
        return x + y


class Encoder(nn.Module):
    def __init__(self, seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout,
                 attention_dropout, norm_layer):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        layers = OrderedDict()
        for i in range(num_layers):
            layers[f"encoder_layer_{i}"] = EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout,
                                                        attention_dropout, norm_layer)
        self.layers = nn.Sequential(layers)
        self.ln = norm_layer(hidden_dim)

    def forward(self, input):
        input = input + self.pos_embedding
        return self.ln(self.layers(self.dropout(input)))


class VisionTransformer(nn.Module):
    def __init__(self, image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32,
                 mlp_dim=64, dropout=0.0, attention_dropout=0.0, num_classes=10):
        super().__init__()
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
        norm_layer = lambda d: nn.LayerNorm(d, eps=1e-6)  # partial(nn.LayerNorm, eps=1e-6)
        self.conv_proj = nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
        seq_length = (image_size // patch_size) ** 2
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        seq_length += 1
        self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout,
                               attention_dropout, norm_layer)
        self.seq_length = seq_length
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(hidden_dim, num_classes)))

    def _process_input(self, x):
        n, c, h, w = x.shape
        p = self.patch_size
        n_h, n_w = h // p, w // p
        x = self.conv_proj(x)                              # (n, hidden_dim, n_h, n_w)
        x = x.reshape(n, self.hidden_dim, n_h * n_w)
        x = x.permute(0, 2, 1)                             # (n, seq, hidden_dim)
        return x

    def forward(self, x):
        x = self._process_input(x)
        n = x.shape[0]
        batch_class_token = self.class_token.expand(n, -1, -1)
        x = torch.cat([batch_class_token, x], dim=1)
        x = self.encoder(x)
        x = x[:, 0]
        x = self.heads(x)
        return x


# --------------------------------------------------------------------------- BertModel
# Hugging Face BertModel (eager attention) at vocab 100, 32 positions, 2 token types, hidden
# 32, 2 layers, 4 heads, intermediate 64, GELU (erf), LayerNorm eps 1e-12, sequence 16;
# returns last_hidden_state and pooler_output (dense + tanh on the first token). The extended
# attention mask is (1 - mask) * finfo(float32).min, added to the scores.

BERT_CONFIG = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=64, max_position_embeddings=32, type_vocab_size=2,
                   layer_norm_eps=1e-12)


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config["vocab_size"], config["hidden_size"])
        self.position_embeddings = nn.Embedding(config["max_position_embeddings"],
                                                config["hidden_size"])
        self.token_type_embeddings = nn.Embedding(config["type_vocab_size"], config["hidden_size"])
        self.LayerNorm = nn.LayerNorm(config["hidden_size"], eps=config["layer_norm_eps"])
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids",
                             torch.arange(config["max_position_embeddings"]).expand((1, -1)),
                             persistent=False)

    def forward(self, input_ids, token_type_ids):
        seq_length = input_ids.shape[1]
        position_ids = self.position_ids[:, 0:seq_length]
        inputs_embeds = self.word_embeddings(input_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + token_type_embeddings
        position_embeddings = self.position_embeddings(position_ids)
        embeddings += position_embeddings
        embeddings = self.LayerNorm(embeddings)
        embeddings = self.dropout(embeddings)
        return embeddings


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config["num_attention_heads"]
        self.attention_head_size = config["hidden_size"] // config["num_attention_heads"]
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config["hidden_size"], self.all_head_size)
        self.key = nn.Linear(config["hidden_size"], self.all_head_size)
        self.value = nn.Linear(config["hidden_size"], self.all_head_size)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class BertSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config["hidden_size"], config["hidden_size"])
        self.LayerNorm = nn.LayerNorm(config["hidden_size"], eps=config["layer_norm_eps"])
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states, attention_mask):
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config["hidden_size"], config["intermediate_size"])
        self.intermediate_act_fn = nn.GELU()

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config["intermediate_size"], config["hidden_size"])
        self.LayerNorm = nn.LayerNorm(config["hidden_size"], eps=config["layer_norm_eps"])
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states, attention_mask):
        attention_output = self.attention(hidden_states, attention_mask)
        intermediate_output = self.intermediate(attention_output)
        return self.output(intermediate_output, attention_output)


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config["num_hidden_layers"])])

    def forward(self, hidden_states, attention_mask):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


class BertPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config["hidden_size"], config["hidden_size"])
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        first_token_tensor = hidden_states[:, 0]
        return self.activation(self.dense(first_token_tensor))


class BertModel(nn.Module):
    def __init__(self, config=None):
        super().__init__()
        config = config or BERT_CONFIG
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config)

    def get_extended_attention_mask(self, attention_mask, dtype=torch.float32):
        extended_attention_mask = attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - extended_attention_mask) * torch.finfo(dtype).min

    def forward(self, input_ids, attention_mask, token_type_ids):
        extended_attention_mask = self.get_extended_attention_mask(attention_mask)
        embedding_output = self.embeddings(input_ids, token_type_ids)
        sequence_output = self.encoder(embedding_output, extended_attention_mask)
        pooled_output = self.pooler(sequence_output)
        return sequence_output, pooled_output


# --------------------------------------------------------------------------- UNet
# milesial/Pytorch-UNet's parts (DoubleConv, Down, Up, OutConv) in a two-level U-Net on 18x18
# images, so the deepest map is 4x4 and the upsampled 8x8 is padded (F.pad, one column and
# one row, asymmetric) to its 9x9 skip. up1 upsamples with nn.Upsample(bilinear,
# align_corners=True), up2 with ConvTranspose2d: the source picks one of the two for the whole
# network with its `bilinear` flag; here each Up takes the flag so one network has both.


class DoubleConv(nn.Module):
    """(convolution => [BN] => ReLU) * 2"""

    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        if not mid_channels:
            mid_channels = out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True))

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    """Downscaling with maxpool then double conv"""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    """Upscaling then double conv"""

    def __init__(self, in_channels, out_channels, bilinear=True):
        super().__init__()
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode='bilinear', align_corners=True)
            self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)
        else:
            self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
            self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        # input is CHW
        diffY = x2.size()[2] - x1.size()[2]
        diffX = x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class OutConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x):
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, n_channels=3, n_classes=2):
        super().__init__()
        self.inc = DoubleConv(n_channels, 8)
        self.down1 = Down(8, 16)
        self.down2 = Down(16, 16)          # 32 // factor with factor 2: up1 is bilinear
        self.up1 = Up(32, 16, bilinear=True)
        self.up2 = Up(16, 8, bilinear=False)
        self.outc = OutConv(8, n_classes)

    def forward(self, x):
        x1 = self.inc(x)                   # [n, 8, 18, 18]
        x2 = self.down1(x1)                # [n, 16, 9, 9]
        x3 = self.down2(x2)                # [n, 16, 4, 4]
        x = self.up1(x3, x2)               # up 8x8, pad to 9x9, cat 32 -> [n, 16, 9, 9]
        x = self.up2(x, x1)                # tconv 18x18, cat 16 -> [n, 8, 18, 18]
        return self.outc(x)


# --------------------------------------------------------------------------- LlamaDecoderLayer
# Hugging Face's LLaMA decoder layer (eager attention) at hidden 64, 4 query heads and 2
# key/value heads of 16 (grouped-query attention), intermediate 128, RMSNorm eps 1e-6, rope
# theta 10000; inputs hidden_states [1, 16, 64] and position_ids [1, 16]. The rotary cos/sin
# come from LlamaRotaryEmbedding (inv_freq a non-persistent buffer, so not in the state_dict),
# the causal mask from torch.full(min).triu(1) as the model's mask builder makes it.

LLAMA_CONFIG = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=128, rms_norm_eps=1e-6, rope_theta=10000.0)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        base = config["rope_theta"]
        dim = config["hidden_size"] // config["num_attention_heads"]
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep,
                                                           slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.head_dim = config["hidden_size"] // config["num_attention_heads"]
        self.num_key_value_groups = config["num_attention_heads"] // config["num_key_value_heads"]
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(config["hidden_size"],
                                config["num_attention_heads"] * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config["hidden_size"],
                                config["num_key_value_heads"] * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config["hidden_size"],
                                config["num_key_value_heads"] * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config["num_attention_heads"] * self.head_dim,
                                config["hidden_size"], bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        # eager_attention_forward
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output)


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config["hidden_size"], config["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(config["hidden_size"], config["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(config["intermediate_size"], config["hidden_size"], bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config=None):
        super().__init__()
        config = config or LLAMA_CONFIG
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config["hidden_size"], eps=config["rms_norm_eps"])
        self.post_attention_layernorm = LlamaRMSNorm(config["hidden_size"],
                                                     eps=config["rms_norm_eps"])
        # LlamaModel owns the rotary embedding; it is here so that the layer computes its own
        # cos/sin from position_ids (it has no parameters).
        self.rotary_emb = LlamaRotaryEmbedding(config)

    @staticmethod
    def causal_mask(seq_len, dtype=torch.float32):
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full((seq_len, seq_len), fill_value=min_dtype, dtype=dtype)
        causal_mask = torch.triu(causal_mask, diagonal=1)
        return causal_mask[None, None, :, :]

    def forward(self, hidden_states, position_ids):
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        attention_mask = self.causal_mask(hidden_states.shape[1], hidden_states.dtype)
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


# --------------------------------------------------------------------------- ConvNeXt
# torchvision's ConvNeXt (convnext_tiny's layout: 4x4 stride-4 patchify stem with LayerNorm2d,
# stages of CNBlocks, LayerNorm2d + 2x2 stride-2 downsampling between stages, avgpool,
# LayerNorm2d + flatten + linear head) with two stages of widths 16 and 32, two blocks each,
# on 32x32 images, 10 classes. CNBlock: depthwise 7x7 conv, permute to channels-last,
# LayerNorm eps 1e-6, Linear 4x, GELU, Linear, permute back, layer scale, stochastic depth
# (identity in eval), residual. The layer scales are random (not 1e-6) so that every block counts.


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        x = x.permute(0, 3, 1, 2)
        return x


class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    def __init__(self, dim, layer_scale, stochastic_depth_prob):
        super().__init__()
        norm_layer = partial_layer_norm_1e6
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
            Permute([0, 2, 3, 1]),
            norm_layer(dim),
            nn.Linear(in_features=dim, out_features=4 * dim, bias=True),
            nn.GELU(),
            nn.Linear(in_features=4 * dim, out_features=dim, bias=True),
            Permute([0, 3, 1, 2]),
        )
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, input):
        result = self.layer_scale * self.block(input)
        result = self.stochastic_depth(result)
        result += input
        return result


def partial_layer_norm_1e6(dim):
    """functools.partial(nn.LayerNorm, eps=1e-6) in torchvision."""
    return nn.LayerNorm(dim, eps=1e-6)


CONVNEXT_SETTING = [(16, 32, 2), (32, None, 2)]   # CNBlockConfig(input, out, num_layers)


class ConvNeXt(nn.Module):
    def __init__(self, setting=None, stochastic_depth_prob=0.1, layer_scale=1e-6,
                 num_classes=10):
        super().__init__()
        setting = setting or CONVNEXT_SETTING
        layers = []
        first = setting[0][0]
        layers.append(nn.Sequential(nn.Conv2d(3, first, kernel_size=4, stride=4, padding=0,
                                              bias=True),
                                    LayerNorm2d(first, eps=1e-6)))
        total_stage_blocks = sum(c[2] for c in setting)
        stage_block_id = 0
        for cin, cout, n in setting:
            stage = []
            for _ in range(n):
                sd_prob = stochastic_depth_prob * stage_block_id / (total_stage_blocks - 1.0)
                stage.append(CNBlock(cin, layer_scale, sd_prob))
                stage_block_id += 1
            layers.append(nn.Sequential(*stage))
            if cout is not None:
                layers.append(nn.Sequential(LayerNorm2d(cin, eps=1e-6),
                                            nn.Conv2d(cin, cout, kernel_size=2, stride=2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last = setting[-1][1] if setting[-1][1] is not None else setting[-1][0]
        self.classifier = nn.Sequential(LayerNorm2d(last, eps=1e-6), nn.Flatten(1),
                                        nn.Linear(last, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = self.classifier(x)
        return x


# --------------------------------------------------------------------------- SwinTransformerBlock
# torchvision's Swin Transformer blocks (swin_t's SwinTransformerBlock with ShiftedWindowAttention
# and shifted_window_attention): two blocks on a [batch, 8, 8, 32] channels-last map, window
# 4x4, 4 heads, MLP ratio 4, LayerNorm eps 1e-5; block 0 unshifted, block 1 shifted by 2
# (torch.roll, the shifted-window attention mask). The relative position bias table is indexed
# with the relative_position_index buffer.


def _get_relative_position_bias(table, index, window_size):
    N = window_size[0] * window_size[1]
    relative_position_bias = table[index]
    relative_position_bias = relative_position_bias.view(N, N, -1)
    return relative_position_bias.permute(2, 0, 1).contiguous().unsqueeze(0)


def shifted_window_attention(input, qkv_weight, proj_weight, relative_position_bias, window_size,
                             num_heads, shift_size, qkv_bias=None, proj_bias=None):
    B, H, W, C = input.shape
    pad_r = (window_size[1] - W % window_size[1]) % window_size[1]
    pad_b = (window_size[0] - H % window_size[0]) % window_size[0]
    x = F.pad(input, (0, 0, 0, pad_r, 0, pad_b))
    _, pad_H, pad_W, _ = x.shape
    shift_size = shift_size.copy()
    if window_size[0] >= pad_H:
        shift_size[0] = 0
    if window_size[1] >= pad_W:
        shift_size[1] = 0
    if sum(shift_size) > 0:
        x = torch.roll(x, shifts=(-shift_size[0], -shift_size[1]), dims=(1, 2))
    num_windows = (pad_H // window_size[0]) * (pad_W // window_size[1])
    x = x.view(B, pad_H // window_size[0], window_size[0], pad_W // window_size[1],
               window_size[1], C)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(B * num_windows, window_size[0] * window_size[1], C)
    qkv = F.linear(x, qkv_weight, qkv_bias)
    qkv = qkv.reshape(x.size(0), x.size(1), 3, num_heads, C // num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    q = q * (C // num_heads) ** -0.5
    attn = q.matmul(k.transpose(-2, -1))
    attn = attn + relative_position_bias
    if sum(shift_size) > 0:
        attn_mask = x.new_zeros((pad_H, pad_W))
        h_slices = ((0, -window_size[0]), (-window_size[0], -shift_size[0]), (-shift_size[0], None))
        w_slices = ((0, -window_size[1]), (-window_size[1], -shift_size[1]), (-shift_size[1], None))
        count = 0
        for h in h_slices:
            for w in w_slices:
                attn_mask[h[0]:h[1], w[0]:w[1]] = count
                count += 1
        attn_mask = attn_mask.view(pad_H // window_size[0], window_size[0],
                                   pad_W // window_size[1], window_size[1])
        attn_mask = attn_mask.permute(0, 2, 1, 3).reshape(num_windows,
                                                          window_size[0] * window_size[1])
        attn_mask = attn_mask.unsqueeze(1) - attn_mask.unsqueeze(2)
        attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(
            attn_mask == 0, float(0.0))
        attn = attn.view(x.size(0) // num_windows, num_windows, num_heads, x.size(1), x.size(1))
        attn = attn + attn_mask.unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, num_heads, x.size(1), x.size(1))
    attn = F.softmax(attn, dim=-1)
    x = attn.matmul(v).transpose(1, 2).reshape(x.size(0), x.size(1), C)
    x = F.linear(x, proj_weight, proj_bias)
    x = x.view(B, pad_H // window_size[0], pad_W // window_size[1], window_size[0],
               window_size[1], C)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(B, pad_H, pad_W, C)
    if sum(shift_size) > 0:
        x = torch.roll(x, shifts=(shift_size[0], shift_size[1]), dims=(1, 2))
    x = x[:, :H, :W, :].contiguous()
    return x


class ShiftedWindowAttention(nn.Module):
    def __init__(self, dim, window_size, shift_size, num_heads):
        super().__init__()
        self.window_size, self.shift_size, self.num_heads = window_size, shift_size, num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads))
        coords_h = torch.arange(self.window_size[0])
        coords_w = torch.arange(self.window_size[1])
        coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()
        relative_coords[:, :, 0] += self.window_size[0] - 1
        relative_coords[:, :, 1] += self.window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * self.window_size[1] - 1
        relative_position_index = relative_coords.sum(-1).flatten()
        self.register_buffer("relative_position_index", relative_position_index)

    def forward(self, x):
        bias = _get_relative_position_bias(self.relative_position_bias_table,
                                           self.relative_position_index, self.window_size)
        return shifted_window_attention(x, self.qkv.weight, self.proj.weight, bias,
                                        self.window_size, self.num_heads,
                                        shift_size=self.shift_size, qkv_bias=self.qkv.bias,
                                        proj_bias=self.proj.bias)


class SwinMLP(nn.Sequential):
    """torchvision.ops.MLP(dim, [4 dim, dim], activation_layer=nn.GELU): keys 0.* and 3.*"""

    def __init__(self, dim, hidden):
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(0.0),
                         nn.Linear(hidden, dim), nn.Dropout(0.0))


class SwinTransformerBlock(nn.Module):
    def __init__(self, dim, num_heads, window_size, shift_size, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = ShiftedWindowAttention(dim, window_size, shift_size, num_heads)
        self.stochastic_depth = StochasticDepth(0.1, "row")
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = SwinMLP(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.stochastic_depth(self.attn(self.norm1(x)))
        x = x + self.stochastic_depth(self.mlp(self.norm2(x)))
        return x


class SwinStage(nn.Module):
    """Two blocks of a swin_t stage (features.1.0 and features.1.1 there): shift 0, then 2.

    The blocks sit in an nn.Sequential named layers (keys layers.0.*, layers.1.*): a bare
    nn.Sequential's keys 0.*, 1.* would need `as 0` in swin.model, which is not a name there."""

    def __init__(self, dim=32, num_heads=4, window=4):
        super().__init__()
        self.layers = nn.Sequential(*[SwinTransformerBlock(dim, num_heads, [window, window],
                                                           [0, 0] if i % 2 == 0
                                                           else [window // 2] * 2)
                                      for i in range(2)])

    def forward(self, x):
        return self.layers(x)


# --------------------------------------------------------------------------- GPT2LMHeadModel
# Hugging Face GPT2LMHeadModel (eager attention) at vocab 100, 32 positions, width 32, 2 layers,
# 4 heads, MLP 4x, gelu_new (the tanh form), LayerNorm eps 1e-5; lm_head tied to wte. Conv1D
# (x @ weight + bias, weight [in, out]); c_attn split into q, k, v; the causal mask is the
# bias buffer tril(ones(32, 32)) sliced to the sequence, applied with torch.where(mask, w,
# finfo.min). The sequence length is symbolic in gpt2.model.

GPT2_CONFIG = dict(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                   layer_norm_epsilon=1e-5)


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                               (input + 0.044715 * torch.pow(input, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        max_positions = config["n_positions"]
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions),
                                                           dtype=torch.bool)).view(
            1, 1, max_positions, max_positions), persistent=False)
        self.embed_dim = config["n_embd"]
        self.num_heads = config["n_head"]
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def _attn(self, query, key, value):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5,
                                                 dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        attn_output = self._attn(query, key, value)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.c_proj(attn_output)
        return self.resid_dropout(attn_output)


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size, config):
        super().__init__()
        embed_dim = config["n_embd"]
        self.c_fc = Conv1D(intermediate_size, embed_dim)
        self.c_proj = Conv1D(embed_dim, intermediate_size)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        return self.dropout(hidden_states)


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden_size = config["n_embd"]
        self.ln_1 = nn.LayerNorm(hidden_size, eps=config["layer_norm_epsilon"])
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=config["layer_norm_epsilon"])
        self.mlp = GPT2MLP(4 * hidden_size, config)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output = self.attn(hidden_states)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        return residual + feed_forward_hidden_states


class GPT2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config["vocab_size"], config["n_embd"])
        self.wpe = nn.Embedding(config["n_positions"], config["n_embd"])
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config["n_layer"])])
        self.ln_f = nn.LayerNorm(config["n_embd"], eps=config["layer_norm_epsilon"])

    def forward(self, input_ids):
        input_shape = input_ids.size()
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long).unsqueeze(0)
        inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = self.drop(inputs_embeds + position_embeds)
        for block in self.h:
            hidden_states = block(hidden_states)
        return self.ln_f(hidden_states)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config=None):
        super().__init__()
        config = config or GPT2_CONFIG
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config["n_embd"], config["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight          # tie_weights()

    def forward(self, input_ids):
        return self.lm_head(self.transformer(input_ids))


# --------------------------------------------------------------------------- DistilBertModel
# Hugging Face DistilBertModel (eager attention) at vocab 100, 32 positions, width 32, 2 layers,
# 4 heads, hidden 64, GELU, LayerNorm eps 1e-12: word + position embeddings, MultiHeadSelfAttention
# with masked_fill((mask == 0).view(bs, 1, 1, k).expand_as(scores), finfo.min), post-norm
# TransformerBlocks. The sequence length is symbolic in distilbert.model.

DISTILBERT_CONFIG = dict(vocab_size=100, max_position_embeddings=32, dim=32, n_layers=2,
                         n_heads=4, hidden_dim=64)


class DistilEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config["vocab_size"], config["dim"])
        self.position_embeddings = nn.Embedding(config["max_position_embeddings"], config["dim"])
        self.LayerNorm = nn.LayerNorm(config["dim"], eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids",
                             torch.arange(config["max_position_embeddings"]).expand((1, -1)),
                             persistent=False)

    def forward(self, input_ids):
        input_embeds = self.word_embeddings(input_ids)
        seq_length = input_embeds.size(1)
        position_ids = self.position_ids[:, :seq_length]
        position_embeddings = self.position_embeddings(position_ids)
        embeddings = input_embeds + position_embeddings
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads, self.dim = config["n_heads"], config["dim"]
        self.dropout = nn.Dropout(0.1)
        self.q_lin = nn.Linear(self.dim, self.dim)
        self.k_lin = nn.Linear(self.dim, self.dim)
        self.v_lin = nn.Linear(self.dim, self.dim)
        self.out_lin = nn.Linear(self.dim, self.dim)

    def forward(self, query, key, value, mask):
        bs, q_length, dim = query.size()
        k_length = key.size(1)
        dim_per_head = self.dim // self.n_heads
        mask_reshp = (bs, 1, 1, k_length)

        def shape(x):
            return x.view(bs, -1, self.n_heads, dim_per_head).transpose(1, 2)

        def unshape(x):
            return x.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * dim_per_head)

        q = shape(self.q_lin(query))
        k = shape(self.k_lin(key))
        v = shape(self.v_lin(value))
        q = q / math.sqrt(dim_per_head)
        scores = torch.matmul(q, k.transpose(2, 3))
        mask = (mask == 0).view(mask_reshp).expand_as(scores)
        scores = scores.masked_fill(mask, torch.tensor(torch.finfo(scores.dtype).min))
        weights = nn.functional.softmax(scores, dim=-1)
        weights = self.dropout(weights)
        context = torch.matmul(weights, v)
        context = unshape(context)
        return self.out_lin(context)


class FFN(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dropout = nn.Dropout(0.1)
        self.lin1 = nn.Linear(config["dim"], config["hidden_dim"])
        self.lin2 = nn.Linear(config["hidden_dim"], config["dim"])
        self.activation = nn.GELU()

    def forward(self, input):
        x = self.lin1(input)
        x = self.activation(x)
        x = self.lin2(x)
        return self.dropout(x)


class DistilTransformerBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = MultiHeadSelfAttention(config)
        self.sa_layer_norm = nn.LayerNorm(config["dim"], eps=1e-12)
        self.ffn = FFN(config)
        self.output_layer_norm = nn.LayerNorm(config["dim"], eps=1e-12)

    def forward(self, x, attn_mask):
        sa_output = self.attention(x, x, x, attn_mask)
        sa_output = self.sa_layer_norm(sa_output + x)
        ffn_output = self.ffn(sa_output)
        return self.output_layer_norm(ffn_output + sa_output)


class DistilTransformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList([DistilTransformerBlock(config)
                                    for _ in range(config["n_layers"])])

    def forward(self, x, attn_mask):
        hidden_state = x
        for layer_module in self.layer:
            hidden_state = layer_module(hidden_state, attn_mask)
        return hidden_state


class DistilBertModel(nn.Module):
    def __init__(self, config=None):
        super().__init__()
        config = config or DISTILBERT_CONFIG
        self.embeddings = DistilEmbeddings(config)
        self.transformer = DistilTransformer(config)

    def forward(self, input_ids, attention_mask):
        return self.transformer(self.embeddings(input_ids), attention_mask)


# --------------------------------------------------------------------------- WhisperEncoder
# Hugging Face WhisperEncoder (eager attention) at 16 mel bins, 32 input frames (so 16
# positions after conv2's stride 2), width 32, 2 layers, 4 heads, FFN 64, GELU, LayerNorm eps
# 1e-5: conv1 + gelu, conv2 (stride 2) + gelu, permute, + embed_positions.weight (the sinusoids
# table, stored in the state_dict), pre-norm WhisperEncoderLayers (k_proj without bias, query
# scaled by head_dim ** -0.5 before q k^T), final layer_norm.

WHISPER_CONFIG = dict(num_mel_bins=16, d_model=32, encoder_layers=2, encoder_attention_heads=4,
                      encoder_ffn_dim=64, max_source_positions=16)


def sinusoids(length, channels, max_timescale=10000):
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length).view(-1, 1) * inv_timescales.view(1, -1)
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)


class WhisperAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=True)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=True)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=True)

    def forward(self, hidden_states):
        bsz, tgt_len = hidden_states.shape[:-1]
        q_input_shape = (bsz, tgt_len, -1, self.head_dim)
        query_states = self.q_proj(hidden_states) * self.scaling
        query_states = query_states.view(*q_input_shape).transpose(1, 2).contiguous()
        key_states = self.k_proj(hidden_states).view(bsz, -1, self.num_heads, self.head_dim)
        key_states = key_states.transpose(1, 2).contiguous()
        value_states = self.v_proj(hidden_states).view(bsz, -1, self.num_heads, self.head_dim)
        value_states = value_states.transpose(1, 2).contiguous()
        # eager_attention_forward with scaling=1.0 (the query is already scaled)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, tgt_len, -1).contiguous()
        return self.out_proj(attn_output)


class WhisperEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config["d_model"]
        self.self_attn = WhisperAttention(self.embed_dim, config["encoder_attention_heads"])
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.activation_fn = nn.GELU()
        self.fc1 = nn.Linear(self.embed_dim, config["encoder_ffn_dim"])
        self.fc2 = nn.Linear(config["encoder_ffn_dim"], self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states = self.self_attn(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = self.fc2(hidden_states)
        return residual + hidden_states


class WhisperEncoder(nn.Module):
    def __init__(self, config=None):
        super().__init__()
        config = config or WHISPER_CONFIG
        embed_dim = config["d_model"]
        self.conv1 = nn.Conv1d(config["num_mel_bins"], embed_dim, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(embed_dim, embed_dim, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(config["max_source_positions"], embed_dim)
        self.embed_positions.requires_grad_(False)
        self.layers = nn.ModuleList([WhisperEncoderLayer(config)
                                     for _ in range(config["encoder_layers"])])
        self.layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, input_features):
        inputs_embeds = nn.functional.gelu(self.conv1(input_features))
        inputs_embeds = nn.functional.gelu(self.conv2(inputs_embeds))
        inputs_embeds = inputs_embeds.permute(0, 2, 1)
        embed_pos = self.embed_positions.weight
        hidden_states = inputs_embeds + embed_pos
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states)
        return self.layer_norm(hidden_states)


# --------------------------------------------------------------------------- DenseNet
# torchvision's DenseNet (densenet121's layout: conv0 7x7 stride 2, norm0, relu0, max pool0,
# dense blocks of _DenseLayers joined by _Transitions, norm5, relu, adaptive avgpool, linear)
# with growth 8, two blocks of 3 layers, 16 initial features, bn_size 2, on 32x32 images, 10
# classes. _DenseLayer: cat of all earlier features, BN, ReLU, 1x1 conv, BN, ReLU, 3x3 conv;
# _DenseBlock returns the cat of all; _Transition: BN, ReLU, 1x1 conv, AvgPool2d(2, 2).


class _DenseLayer(nn.Module):
    def __init__(self, num_input_features, growth_rate, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1,
                               stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1,
                               padding=1, bias=False)

    def bn_function(self, inputs):
        concated_features = torch.cat(inputs, 1)
        return self.conv1(self.relu1(self.norm1(concated_features)))

    def forward(self, input):
        prev_features = [input] if isinstance(input, torch.Tensor) else input
        bottleneck_output = self.bn_function(prev_features)
        return self.conv2(self.relu2(self.norm2(bottleneck_output)))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers, num_input_features, bn_size, growth_rate):
        super().__init__()
        for i in range(num_layers):
            layer = _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size)
            self.add_module("denselayer%d" % (i + 1), layer)

    def forward(self, init_features):
        features = [init_features]
        for name, layer in self.items():
            new_features = layer(features)
            features.append(new_features)
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, num_input_features, num_output_features):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1,
                              bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    def __init__(self, growth_rate=8, block_config=(3, 3), num_init_features=16, bn_size=2,
                 num_classes=10):
        super().__init__()
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, num_init_features, kernel_size=7, stride=2, padding=3,
                                bias=False)),
            ("norm0", nn.BatchNorm2d(num_init_features)),
            ("relu0", nn.ReLU(inplace=True)),
            ("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
        ]))
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            block = _DenseBlock(num_layers, num_features, bn_size, growth_rate)
            self.features.add_module("denseblock%d" % (i + 1), block)
            num_features = num_features + num_layers * growth_rate
            if i != len(block_config) - 1:
                trans = _Transition(num_features, num_features // 2)
                self.features.add_module("transition%d" % (i + 1), trans)
                num_features = num_features // 2
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.classifier = nn.Linear(num_features, num_classes)

    def forward(self, x):
        features = self.features(x)
        out = F.relu(features, inplace=True)
        out = F.adaptive_avg_pool2d(out, (1, 1))
        out = torch.flatten(out, 1)
        return self.classifier(out)


# --------------------------------------------------------------------------- SqueezeNet
# torchvision's SqueezeNet 1.1 (conv 3x3 stride 2, ReLU, MaxPool2d(3, 2, ceil_mode=True), Fire
# modules, final 1x1 conv classifier with ReLU and adaptive avgpool) with three Fire modules at
# widths / 4, on 32x32 images, 10 classes. Fire: squeeze 1x1 + ReLU, then the cat of expand1x1
# + ReLU and expand3x3 (padding 1) + ReLU.


class Fire(nn.Module):
    def __init__(self, inplanes, squeeze_planes, expand1x1_planes, expand3x3_planes):
        super().__init__()
        self.inplanes = inplanes
        self.squeeze = nn.Conv2d(inplanes, squeeze_planes, kernel_size=1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze_planes, expand1x1_planes, kernel_size=1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze_planes, expand3x3_planes, kernel_size=3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    def __init__(self, num_classes=10, dropout=0.5):
        super().__init__()
        self.num_classes = num_classes
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, stride=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(16, 4, 8, 8),
            Fire(16, 4, 8, 8),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(16, 8, 16, 16),
        )
        final_conv = nn.Conv2d(32, self.num_classes, kernel_size=1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), final_conv, nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        x = self.features(x)
        x = self.classifier(x)
        return torch.flatten(x, 1)
