/*
 * eoc-proxy stand-in for miniaudio.h (https://miniaud.io).
 *
 * The Go module zip of github.com/ollama/ollama leaves out llama.cpp's
 * vendor/ directory. Debian packages provide nlohmann/json.hpp and
 * stb/stb_image.h, but there is no Debian package for miniaudio. Its only
 * user in the Ollama build is llama/llama.cpp/tools/mtmd/mtmd-helper.cpp,
 * which decodes audio input for multimodal models.
 *
 * This header declares just the symbols that file uses. Every decoder
 * call fails with MA_ERROR, so audio input is rejected ("not a valid
 * audio file") while text and image input are unaffected. Encoding
 * (only used under MTMD_AUDIO_DEBUG) writes nothing.
 */
#ifndef EOC_MINIAUDIO_STUB_H
#define EOC_MINIAUDIO_STUB_H

#include <stddef.h>

#ifndef MA_API
#define MA_API static
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long long ma_uint64;
typedef unsigned int ma_uint32;

typedef int ma_result;
#define MA_SUCCESS 0
#define MA_ERROR (-1)
#define MA_NOT_IMPLEMENTED (-29)

typedef enum {
    ma_format_unknown = 0,
    ma_format_u8 = 1,
    ma_format_s16 = 2,
    ma_format_s24 = 3,
    ma_format_s32 = 4,
    ma_format_f32 = 5
} ma_format;

typedef enum {
    ma_encoding_format_unknown = 0,
    ma_encoding_format_wav = 1
} ma_encoding_format;

typedef struct {
    ma_format format;
    ma_uint32 channels;
    ma_uint32 sampleRate;
} ma_decoder_config;

typedef struct {
    int unused;
} ma_decoder;

typedef struct {
    ma_encoding_format encodingFormat;
    ma_format format;
    ma_uint32 channels;
    ma_uint32 sampleRate;
} ma_encoder_config;

typedef struct {
    int unused;
} ma_encoder;

MA_API ma_decoder_config ma_decoder_config_init(ma_format outputFormat, ma_uint32 outputChannels, ma_uint32 outputSampleRate) {
    ma_decoder_config c;
    c.format = outputFormat;
    c.channels = outputChannels;
    c.sampleRate = outputSampleRate;
    return c;
}

MA_API ma_result ma_decoder_init_memory(const void *pData, size_t dataSize, const ma_decoder_config *pConfig, ma_decoder *pDecoder) {
    (void)pData; (void)dataSize; (void)pConfig;
    if (pDecoder) pDecoder->unused = 0;
    return MA_NOT_IMPLEMENTED;
}

MA_API ma_result ma_decoder_get_length_in_pcm_frames(ma_decoder *pDecoder, ma_uint64 *pLength) {
    (void)pDecoder;
    if (pLength) *pLength = 0;
    return MA_NOT_IMPLEMENTED;
}

MA_API ma_result ma_decoder_read_pcm_frames(ma_decoder *pDecoder, void *pFramesOut, ma_uint64 frameCount, ma_uint64 *pFramesRead) {
    (void)pDecoder; (void)pFramesOut; (void)frameCount;
    if (pFramesRead) *pFramesRead = 0;
    return MA_NOT_IMPLEMENTED;
}

MA_API ma_result ma_decoder_uninit(ma_decoder *pDecoder) {
    (void)pDecoder;
    return MA_SUCCESS;
}

MA_API ma_encoder_config ma_encoder_config_init(ma_encoding_format encodingFormat, ma_format format, ma_uint32 channels, ma_uint32 sampleRate) {
    ma_encoder_config c;
    c.encodingFormat = encodingFormat;
    c.format = format;
    c.channels = channels;
    c.sampleRate = sampleRate;
    return c;
}

MA_API ma_result ma_encoder_init_file(const char *pFilePath, const ma_encoder_config *pConfig, ma_encoder *pEncoder) {
    (void)pFilePath; (void)pConfig;
    if (pEncoder) pEncoder->unused = 0;
    return MA_NOT_IMPLEMENTED;
}

MA_API ma_result ma_encoder_write_pcm_frames(ma_encoder *pEncoder, const void *pFramesIn, ma_uint64 frameCount, ma_uint64 *pFramesWritten) {
    (void)pEncoder; (void)pFramesIn; (void)frameCount;
    if (pFramesWritten) *pFramesWritten = 0;
    return MA_NOT_IMPLEMENTED;
}

MA_API void ma_encoder_uninit(ma_encoder *pEncoder) {
    (void)pEncoder;
}

#ifdef __cplusplus
}
#endif

#endif /* EOC_MINIAUDIO_STUB_H */
