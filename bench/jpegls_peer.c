/* jpegls_peer: JPEG-LS (CharLS) as a peer of the difference codec on raw
 * frames: each frame coded on its own at NEAR=k (every byte within k),
 * decoded again and compared.
 *
 *   jpegls_peer FORMAT WIDTH HEIGHT NEAR FILE|-
 *
 * FORMAT: BGR (one image, three components, sample-interleaved), GRAY8, or
 * I420 (each plane its own image: Y, then U and V of ceil(W/2) x ceil(H/2)).
 * Prints: frames=N bytes/frame=B maxerr=E psnr=P */
#include <charls/charls.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct image {
  int width, height, components;
  size_t offset; /* within the frame */
};

static size_t code_image(const unsigned char *in, const struct image *im, int near,
                         unsigned char *out, size_t out_size, unsigned char *decoded) {
  const size_t n = (size_t)im->width * im->height * im->components;
  charls_jpegls_encoder *e = charls_jpegls_encoder_create();
  charls_frame_info fi = {(uint32_t)im->width, (uint32_t)im->height, 8, im->components};
  size_t written = 0;
  if (charls_jpegls_encoder_set_frame_info(e, &fi) != CHARLS_JPEGLS_ERRC_SUCCESS ||
      charls_jpegls_encoder_set_near_lossless(e, near) != CHARLS_JPEGLS_ERRC_SUCCESS ||
      (im->components > 1 && charls_jpegls_encoder_set_interleave_mode(
                                 e, CHARLS_INTERLEAVE_MODE_SAMPLE) != CHARLS_JPEGLS_ERRC_SUCCESS) ||
      charls_jpegls_encoder_set_destination_buffer(e, out, out_size) !=
          CHARLS_JPEGLS_ERRC_SUCCESS ||
      charls_jpegls_encoder_encode_from_buffer(e, in, n, 0) != CHARLS_JPEGLS_ERRC_SUCCESS ||
      charls_jpegls_encoder_get_bytes_written(e, &written) != CHARLS_JPEGLS_ERRC_SUCCESS) {
    fprintf(stderr, "jpegls_peer: encoding failed\n");
    exit(1);
  }
  charls_jpegls_encoder_destroy(e);

  charls_jpegls_decoder *d = charls_jpegls_decoder_create();
  if (charls_jpegls_decoder_set_source_buffer(d, out, written) != CHARLS_JPEGLS_ERRC_SUCCESS ||
      charls_jpegls_decoder_read_header(d) != CHARLS_JPEGLS_ERRC_SUCCESS ||
      charls_jpegls_decoder_decode_to_buffer(d, decoded, n, 0) != CHARLS_JPEGLS_ERRC_SUCCESS) {
    fprintf(stderr, "jpegls_peer: decoding failed\n");
    exit(1);
  }
  charls_jpegls_decoder_destroy(d);
  return written;
}

int main(int argc, char **argv) {
  struct image images[3];
  int n_images = 0, near, w, h;
  size_t frame_bytes = 0, total = 0, frames = 0, i;
  int maxerr = 0;
  double se = 0;
  FILE *f;
  unsigned char *in, *dec, *out;
  if (argc != 6) {
    fprintf(stderr, "usage: jpegls_peer BGR|GRAY8|I420 WIDTH HEIGHT NEAR FILE|-\n");
    return 2;
  }
  w = atoi(argv[2]);
  h = atoi(argv[3]);
  near = atoi(argv[4]);
  if (w <= 0 || h <= 0 || near < 0 || near > 255) {
    fprintf(stderr, "jpegls_peer: bad size or NEAR\n");
    return 2;
  }
  if (!strcmp(argv[1], "BGR")) {
    images[n_images++] = (struct image){w, h, 3, 0};
  } else if (!strcmp(argv[1], "GRAY8")) {
    images[n_images++] = (struct image){w, h, 1, 0};
  } else if (!strcmp(argv[1], "I420")) {
    const int cw = (w + 1) / 2, ch = (h + 1) / 2;
    images[n_images++] = (struct image){w, h, 1, 0};
    images[n_images++] = (struct image){cw, ch, 1, (size_t)w * h};
    images[n_images++] = (struct image){cw, ch, 1, (size_t)w * h + (size_t)cw * ch};
  } else {
    fprintf(stderr, "jpegls_peer: unknown format %s\n", argv[1]);
    return 2;
  }
  for (i = 0; i < (size_t)n_images; ++i)
    frame_bytes += (size_t)images[i].width * images[i].height * images[i].components;
  f = strcmp(argv[5], "-") ? fopen(argv[5], "rb") : stdin;
  if (!f) {
    perror(argv[5]);
    return 1;
  }
  in = malloc(frame_bytes);
  dec = malloc(frame_bytes);
  out = malloc(frame_bytes * 2 + 65536);
  while (fread(in, 1, frame_bytes, f) == frame_bytes) {
    for (i = 0; i < (size_t)n_images; ++i)
      total += code_image(in + images[i].offset, &images[i], near, out, frame_bytes * 2 + 65536,
                          dec + images[i].offset);
    for (i = 0; i < frame_bytes; ++i) {
      const int d = abs((int)in[i] - (int)dec[i]);
      se += (double)d * d;
      if (d > maxerr) maxerr = d;
    }
    frames++;
  }
  if (f != stdin) fclose(f);
  {
    const double mse = frames ? se / ((double)frame_bytes * frames) : 0;
    printf("frames=%zu bytes/frame=%.0f maxerr=%d psnr=%.2f\n", frames,
           frames ? (double)total / frames : 0.0, maxerr,
           mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : 99.0);
  }
  free(in);
  free(dec);
  free(out);
  return 0;
}
