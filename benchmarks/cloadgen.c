/*
 * cloadgen: the compiled load generator (proton-C proactor), same command line subset and same
 * "loadgen/1" JSON line as benchmarks/loadgen.py, so that the client is never the bottleneck.
 *
 * Built by benchmarks/cloadgen.py (gcc -O2 ... -lqpid-proton;
 * Debian: libqpid-proton11-dev). Usage:
 *   cloadgen receiver --url 127.0.0.1:5672 --address q --count N [--credit C] [--listen]
 *                     [--idle-timeout S] [--timeout S] [--out FILE] [--run-id ID]
 *                     [--ready-file F] [--body-size B]
 *   cloadgen sender   --url 127.0.0.1:5672 --address q --count N [--presettled] [--window W]
 *                     [--rate R] [--body-size B] [--timeout S] [--out FILE] [--run-id ID]
 *                     [--ready-file F]
 *
 * Message: address + a binary body of --body-size bytes whose last 16 bytes are the marker
 * TS_MAGIC and the send time (big-endian uint64 ns, CLOCK_REALTIME). It is encoded once; per
 * message only the 8 timestamp bytes are overwritten. Latency = receive time - send time, so it
 * is only meaningful with both clients on one host.
 */
#define _GNU_SOURCE
#include <proton/connection.h>
#include <proton/condition.h>
#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/listener.h>
#include <proton/message.h>
#include <proton/netaddr.h>
#include <proton/proactor.h>
#include <proton/sasl.h>
#include <proton/session.h>
#include <proton/transport.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MIN_BODY_SIZE 16
#define TICK_MS 100
#define MAX_SECONDS 4096

static const unsigned char TS_MAGIC[8] = {0xa5, 'L', 'G', 'T', 'S', 0x5a, 0xc3, 0x01};

typedef struct {
  long sent, settled, received;
  uint32_t *lat;          /* receiver: latencies (µs) of the messages of this second */
  long nlat, caplat;
} second_t;

typedef struct {
  /* options */
  bool sender, presettled, listen;
  const char *url, *address, *out, *run_id, *ready_file;
  long count, window, credit;
  int body_size;
  double rate, timeout, idle_timeout;
  /* state */
  pn_proactor_t *proactor;
  pn_listener_t *listener;
  pn_connection_t *conn;
  pn_link_t *link;
  pn_message_t *message;
  char *buf;              /* sender: the encoded message; receiver: receive buffer */
  size_t buflen, bufcap;
  size_t ts_off;          /* offset of the 8 timestamp bytes in buf */
  long sent, settled, accepted, released, rejected, modified, received, missing;
  bool saw_presettled, done, ready, closing;
  uint32_t *lat;          /* receiver: every latency in µs */
  int64_t first_ns, last_ns;
  double start_mono, deadline, pace_start, last_progress;
  struct rusage ru0, ru1;
  bool have_ru0, have_ru1;
  char error[256];
  second_t *secs;
  int64_t sec0;           /* unix second of secs[0] */
} app_t;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void touch(const char *path) {
  if (!path) return;
  FILE *f = fopen(path, "w");
  if (f) fclose(f);
}

static void set_error(app_t *a, const char *fmt, const char *x, const char *y) {
  if (a->error[0]) return;
  snprintf(a->error, sizeof a->error, fmt, x ? x : "", y ? y : "");
}

static second_t *second_of(app_t *a, int64_t ns) {
  int64_t s = ns / 1000000000LL;
  if (!a->sec0) a->sec0 = s;
  int64_t i = s - a->sec0;
  if (i < 0) i = 0;
  if (i >= MAX_SECONDS) i = MAX_SECONDS - 1;
  return &a->secs[i];
}

static void start_cpu(app_t *a) {
  if (!a->have_ru0) { getrusage(RUSAGE_SELF, &a->ru0); a->have_ru0 = true; }
}

static void finish(app_t *a) {
  if (a->done) return;
  a->done = true;
  getrusage(RUSAGE_SELF, &a->ru1);
  a->have_ru1 = true;
  if (a->conn) pn_connection_close(a->conn);
  if (a->listener) pn_listener_close(a->listener);
  pn_proactor_cancel_timeout(a->proactor);
}

/* ------------------------------------------------------------------ sender */

static bool encode_message(app_t *a) {
  char *body = calloc(1, a->body_size);
  memcpy(body + a->body_size - 16, TS_MAGIC, 8);
  a->message = pn_message();
  pn_message_set_address(a->message, a->address);
  pn_data_put_binary(pn_message_body(a->message), pn_bytes(a->body_size, body));
  free(body);
  a->bufcap = a->body_size + 512;
  a->buf = malloc(a->bufcap);
  size_t size = a->bufcap;
  if (pn_message_encode(a->message, a->buf, &size) != 0) return false;
  a->buflen = size;
  a->ts_off = size - 8;
  return memcmp(a->buf + size - 16, TS_MAGIC, 8) == 0;
}

static void send_some(app_t *a) {
  pn_link_t *l = a->link;
  if (!l || a->done || a->closing) return;
  long allowed = a->count;
  if (a->rate > 0) {
    long due = (long)((mono() - a->pace_start) * a->rate) + 1;
    if (due < allowed) allowed = due;
  }
  while (a->sent < allowed && pn_link_credit(l) > 0 &&
         (a->window <= 0 || a->presettled || a->sent - a->settled < a->window)) {
    uint64_t tag = (uint64_t)a->sent;
    pn_delivery_t *d = pn_delivery(l, pn_dtag((const char *)&tag, sizeof tag));
    int64_t t = now_ns();
    for (int i = 7; i >= 0; --i) a->buf[a->ts_off + 7 - i] = (char)((uint64_t)t >> (8 * i));
    pn_link_send(l, a->buf, a->buflen);
    pn_link_advance(l);
    if (a->presettled) pn_delivery_settle(d);
    if (!a->first_ns) a->first_ns = t;
    a->last_ns = t;
    second_of(a, t)->sent++;
    a->sent++;
  }
  if (a->presettled && a->sent >= a->count) {
    a->closing = true;     /* closing flushes what was sent before the close frame */
    finish(a);
  }
}

static void on_sender_delivery(app_t *a, pn_delivery_t *d) {
  if (!pn_delivery_updated(d) || !pn_delivery_settled(d)) return;
  switch (pn_delivery_remote_state(d)) {
    case PN_ACCEPTED: a->accepted++; break;
    case PN_RELEASED: a->released++; break;
    case PN_REJECTED: a->rejected++; break;
    case PN_MODIFIED: a->modified++; break;
    default: break;
  }
  pn_delivery_settle(d);
  a->settled++;
  int64_t t = now_ns();
  a->last_ns = t;
  second_of(a, t)->settled++;
  a->last_progress = mono();
  if (a->settled >= a->count) finish(a);
}

/* ------------------------------------------------------------------ receiver */

static void on_receiver_delivery(app_t *a, pn_delivery_t *d) {
  if (!pn_delivery_readable(d) || pn_delivery_partial(d)) return;
  pn_link_t *l = pn_delivery_link(d);
  size_t n = pn_delivery_pending(d);
  if (n > a->bufcap) { a->bufcap = n * 2; a->buf = realloc(a->buf, a->bufcap); }
  ssize_t got = pn_link_recv(l, a->buf, n);
  int64_t t = now_ns();
  if (got < 0) got = 0;
  if (pn_delivery_settled(d)) a->saw_presettled = true;
  else pn_delivery_update(d, PN_ACCEPTED);
  pn_link_advance(l);
  pn_delivery_settle(d);
  second_t *s = second_of(a, t);
  if (got >= 16 && memcmp(a->buf + got - 16, TS_MAGIC, 8) == 0) {
    uint64_t sent = 0;
    for (int i = 0; i < 8; ++i) sent = (sent << 8) | (unsigned char)a->buf[got - 8 + i];
    int64_t us = (t - (int64_t)sent) / 1000;
    uint32_t v = us < 0 ? 0 : (us > 0xffffffffLL ? 0xffffffffu : (uint32_t)us);
    a->lat[a->received - a->missing] = v;
    if (s->nlat == s->caplat) {
      s->caplat = s->caplat ? s->caplat * 2 : 1024;
      s->lat = realloc(s->lat, s->caplat * sizeof *s->lat);
    }
    s->lat[s->nlat++] = v;
  } else {
    a->missing++;
  }
  a->received++;
  s->received++;
  if (!a->first_ns) a->first_ns = t;
  a->last_ns = t;
  a->last_progress = mono();
  if (a->received >= a->count) { finish(a); return; }
  long credit = pn_link_credit(l);
  if (credit <= a->credit / 2) pn_link_flow(l, a->credit - credit);
}

/* ------------------------------------------------------------------ events */

static void check_condition(app_t *a, pn_condition_t *c, const char *what) {
  if (pn_condition_is_set(c) && !a->done)
    set_error(a, "peer closed (%s)", pn_condition_get_name(c), NULL);
  (void)what;
}

static void open_link(app_t *a, pn_session_t *s) {
  if (a->sender) {
    a->link = pn_sender(s, "cloadgen-sender");
    pn_terminus_set_address(pn_link_target(a->link), a->address);
    if (a->presettled) pn_link_set_snd_settle_mode(a->link, PN_SND_SETTLED);
  } else {
    a->link = pn_receiver(s, "cloadgen-receiver");
    pn_terminus_set_address(pn_link_source(a->link), a->address);
  }
  pn_link_open(a->link);
}

static void handle(app_t *a, pn_event_t *e) {
  switch (pn_event_type(e)) {
    case PN_LISTENER_OPEN:
      touch(a->ready_file);
      break;
    case PN_LISTENER_ACCEPT: {
      pn_transport_t *t = pn_transport();
      pn_transport_set_server(t);
      pn_sasl_allowed_mechs(pn_sasl(t), "ANONYMOUS");
      pn_listener_accept2(pn_event_listener(e), NULL, t);
      break;
    }
    case PN_CONNECTION_INIT:
      a->conn = pn_event_connection(e);
      pn_connection_set_container(a->conn, a->sender ? "cloadgen-sender" : "cloadgen-receiver");
      if (!a->listen) {
        pn_session_t *s = pn_session(a->conn);
        pn_connection_open(a->conn);
        pn_session_open(s);
        open_link(a, s);
      }
      break;
    case PN_CONNECTION_REMOTE_OPEN:
      if (a->listen) pn_connection_open(pn_event_connection(e));
      break;
    case PN_SESSION_REMOTE_OPEN:
      if (a->listen) pn_session_open(pn_event_session(e));
      break;
    case PN_LINK_REMOTE_OPEN: {
      pn_link_t *l = pn_event_link(e);
      if (a->listen && !a->link) {          /* direct: accept the peer's sender */
        a->link = l;
        pn_terminus_copy(pn_link_target(l), pn_link_remote_target(l));
        pn_terminus_copy(pn_link_source(l), pn_link_remote_source(l));
        pn_link_open(l);
      }
      if (!a->ready) {
        a->ready = true;
        a->last_progress = mono();
        a->pace_start = mono();
        start_cpu(a);
        if (!a->listen) touch(a->ready_file);
        if (!a->sender) pn_link_flow(l, a->credit);
      }
      if (a->sender) send_some(a);
      break;
    }
    case PN_LINK_FLOW:
    case PN_CONNECTION_WAKE:
      if (a->sender) send_some(a);
      break;
    case PN_DELIVERY:
      if (a->sender) on_sender_delivery(a, pn_event_delivery(e));
      else on_receiver_delivery(a, pn_event_delivery(e));
      if (a->sender && !a->done) send_some(a);
      break;
    case PN_PROACTOR_TIMEOUT: {
      double t = mono();
      if (!a->done) {
        if (t >= a->deadline) {
          char buf[64];
          snprintf(buf, sizeof buf, "%g", a->timeout);
          set_error(a, "timeout after %ss%s", buf, NULL);
          finish(a);
        } else if (!a->sender && a->received && t - a->last_progress > a->idle_timeout) {
          char buf[64];
          snprintf(buf, sizeof buf, "%g", a->idle_timeout);
          set_error(a, "idle for %ss%s", buf, NULL);
          finish(a);
        } else {
          if (a->sender && a->conn && a->ready) pn_connection_wake(a->conn);
          int ms = (a->sender && a->rate > 0) ? 1 : TICK_MS;
          pn_proactor_set_timeout(a->proactor, ms);
        }
      }
      break;
    }
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH:
      check_condition(a, pn_link_remote_condition(pn_event_link(e)), "link");
      if (!a->done) { set_error(a, "peer closed the link%s%s", NULL, NULL); finish(a); }
      break;
    case PN_SESSION_REMOTE_CLOSE:
      check_condition(a, pn_session_remote_condition(pn_event_session(e)), "session");
      if (!a->done) { set_error(a, "peer closed the session%s%s", NULL, NULL); finish(a); }
      break;
    case PN_CONNECTION_REMOTE_CLOSE:
      check_condition(a, pn_connection_remote_condition(pn_event_connection(e)), "connection");
      if (!a->done) {
        if (!(a->received >= a->count))
          set_error(a, "peer closed the connection%s%s", NULL, NULL);
        finish(a);
      }
      pn_connection_close(pn_event_connection(e));
      break;
    case PN_TRANSPORT_CLOSED:
      if (!a->done) {
        pn_condition_t *c = pn_transport_condition(pn_event_transport(e));
        set_error(a, "transport closed: %s %s", pn_condition_get_name(c),
                  pn_condition_get_description(c));
        finish(a);
      }
      a->conn = NULL;
      if (a->listener && !a->closing) { pn_listener_close(a->listener); }
      break;
    case PN_LISTENER_CLOSE: {
      pn_condition_t *c = pn_listener_condition(pn_event_listener(e));
      if (pn_condition_is_set(c) && !a->done) {
        set_error(a, "listen failed: %s %s", pn_condition_get_name(c),
                  pn_condition_get_description(c));
        finish(a);
      }
      a->listener = NULL;
      break;
    }
    default:
      break;
  }
}

/* ------------------------------------------------------------------ output */

static int cmp_u32(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return a < b ? -1 : a > b;
}

/* nearest-rank percentile, as loadgen.py */
static long pct(const uint32_t *v, long n, double p) {
  if (n <= 0) return -1;
  long k = (long)(p / 100.0 * n + 0.999999999);
  if (k < 1) k = 1;
  if (k > n) k = n;
  return v[k - 1];
}

static void put_num_or_null(FILE *f, const char *key, long v, bool present) {
  if (present) fprintf(f, "\"%s\": %ld, ", key, v);
  else fprintf(f, "\"%s\": null, ", key);
}

static void put_str(FILE *f, const char *s) {
  if (!s) { fputs("null", f); return; }
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void write_result(app_t *a, FILE *f) {
  long count = a->sender ? (a->presettled ? a->sent : a->settled) : a->received;
  double elapsed = (a->first_ns && a->last_ns > a->first_ns) ? (a->last_ns - a->first_ns) / 1e9 : 0;
  double ut = 0, st = 0;
  if (a->have_ru0 && a->have_ru1) {
    ut = (a->ru1.ru_utime.tv_sec - a->ru0.ru_utime.tv_sec) +
         (a->ru1.ru_utime.tv_usec - a->ru0.ru_utime.tv_usec) / 1e6;
    st = (a->ru1.ru_stime.tv_sec - a->ru0.ru_stime.tv_sec) +
         (a->ru1.ru_stime.tv_usec - a->ru0.ru_stime.tv_usec) / 1e6;
  }
  long nlat = a->received - a->missing;
  if (!a->sender) qsort(a->lat, nlat, sizeof *a->lat, cmp_u32);
  fprintf(f, "{\"schema\": \"loadgen/1\", \"client\": \"cloadgen\", \"run_id\": ");
  put_str(f, a->run_id);
  fprintf(f, ", \"role\": \"%s\", \"pid\": %d, \"url\": ", a->sender ? "sender" : "receiver",
          (int)getpid());
  put_str(f, a->url);
  fprintf(f, ", \"address\": ");
  put_str(f, a->address);
  fprintf(f, ", \"listen\": %s, \"count\": %ld, \"target_count\": %ld, \"body_size\": %d, ",
          a->listen ? "true" : "false", count, a->count, a->body_size);
  fprintf(f, "\"presettled\": %s, ",
          (a->sender ? a->presettled : a->saw_presettled) ? "true" : "false");
  put_num_or_null(f, "credit", a->credit, !a->sender);
  put_num_or_null(f, "window", a->window, a->sender && a->window > 0);
  fprintf(f, "\"start_ts\": %.6f, \"end_ts\": %.6f, \"elapsed_s\": %.6f, ", a->first_ns / 1e9,
          a->last_ns / 1e9, elapsed);
  if (elapsed > 0) fprintf(f, "\"msgs_per_s\": %.1f, ", count / elapsed);
  else fprintf(f, "\"msgs_per_s\": null, ");
  fprintf(f, "\"cpu_user_s\": %.6f, \"cpu_sys_s\": %.6f, ", ut, st);
  if (count > 0) fprintf(f, "\"cpu_us_per_msg\": %.3f, ", (ut + st) * 1e6 / count);
  else fprintf(f, "\"cpu_us_per_msg\": null, ");
  bool lat = !a->sender && nlat > 0;
  put_num_or_null(f, "lat_p50_us", pct(a->lat, nlat, 50), lat);
  put_num_or_null(f, "lat_p90_us", pct(a->lat, nlat, 90), lat);
  put_num_or_null(f, "lat_p99_us", pct(a->lat, nlat, 99), lat);
  put_num_or_null(f, "lat_p999_us", pct(a->lat, nlat, 99.9), lat);
  put_num_or_null(f, "lat_max_us", lat ? (long)a->lat[nlat - 1] : 0, lat);
  put_num_or_null(f, "lat_missing", a->missing, !a->sender);
  bool uns = a->sender && !a->presettled;
  put_num_or_null(f, "accepted", a->accepted, uns);
  put_num_or_null(f, "released", a->released, uns);
  put_num_or_null(f, "rejected", a->rejected, uns);
  put_num_or_null(f, "modified", a->modified, uns);
  put_num_or_null(f, "settled", a->settled, uns);
  fprintf(f, "\"error\": ");
  put_str(f, a->error[0] ? a->error : NULL);
  fprintf(f, ", \"per_second\": [");
  bool first = true;
  for (int i = 0; i < MAX_SECONDS && a->sec0; ++i) {
    second_t *s = &a->secs[i];
    if (!s->sent && !s->settled && !s->received) continue;
    fprintf(f, "%s{\"t\": %lld, \"sent\": %ld, \"settled\": %ld, \"received\": %ld, ",
            first ? "" : ", ", (long long)(a->sec0 + i), s->sent, s->settled, s->received);
    first = false;
    if (s->nlat) {
      qsort(s->lat, s->nlat, sizeof *s->lat, cmp_u32);
      fprintf(f, "\"p50_us\": %ld, \"p99_us\": %ld}", pct(s->lat, s->nlat, 50),
              pct(s->lat, s->nlat, 99));
    } else {
      fprintf(f, "\"p50_us\": null, \"p99_us\": null}");
    }
  }
  fprintf(f, "]}\n");
}

static void summary(app_t *a) {
  long count = a->sender ? (a->presettled ? a->sent : a->settled) : a->received;
  double elapsed = (a->first_ns && a->last_ns > a->first_ns) ? (a->last_ns - a->first_ns) / 1e9 : 0;
  fprintf(stderr, "cloadgen: %s %s: %ld/%ld msgs in %.3fs = %.0f msg/s%s%s\n",
          a->sender ? "sender" : "receiver", a->address, count, a->count, elapsed,
          elapsed > 0 ? count / elapsed : 0.0, a->error[0] ? ", ERROR: " : "", a->error);
}

/* ------------------------------------------------------------------ main */

static void usage(void) {
  fprintf(stderr, "usage: cloadgen sender|receiver [--url H:P] [--address A] [--count N] "
                  "[--body-size B] [--timeout S] [--out F] [--run-id ID] [--ready-file F] "
                  "[--presettled] [--window W] [--rate R] [--credit C] [--idle-timeout S] "
                  "[--listen]\n");
  exit(2);
}

int main(int argc, char **argv) {
  app_t *a = calloc(1, sizeof *a);
  if (argc < 2) usage();
  if (!strcmp(argv[1], "sender")) a->sender = true;
  else if (strcmp(argv[1], "receiver")) usage();
  a->url = "127.0.0.1:5672";
  a->address = "loadgen";
  a->count = 100000;
  a->body_size = 100;
  a->timeout = 120;
  a->credit = 250;
  a->idle_timeout = 10;
  for (int i = 2; i < argc; ++i) {
    const char *o = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(o, name) && v && (++i, true))
    if (ARG("--url")) a->url = v;
    else if (ARG("--address")) a->address = v;
    else if (ARG("--count")) a->count = atol(v);
    else if (ARG("--body-size")) a->body_size = atoi(v);
    else if (ARG("--timeout")) a->timeout = atof(v);
    else if (ARG("--out")) a->out = v;
    else if (ARG("--run-id")) a->run_id = v;
    else if (ARG("--ready-file")) a->ready_file = v;
    else if (ARG("--window")) a->window = atol(v);
    else if (ARG("--rate")) a->rate = atof(v);
    else if (ARG("--credit")) a->credit = atol(v);
    else if (ARG("--idle-timeout")) a->idle_timeout = atof(v);
    else if (ARG("--batch")) (void)0;        /* loadgen.py's I/O batch: not needed here */
    else if (!strcmp(o, "--presettled")) a->presettled = true;
    else if (!strcmp(o, "--listen")) a->listen = true;
    else { fprintf(stderr, "cloadgen: unknown option %s\n", o); usage(); }
#undef ARG
  }
  if (a->body_size < MIN_BODY_SIZE || a->count <= 0 || a->credit <= 0) {
    fprintf(stderr, "cloadgen: --body-size must be >= %d, --count and --credit > 0\n",
            MIN_BODY_SIZE);
    return 2;
  }
  a->secs = calloc(MAX_SECONDS, sizeof *a->secs);
  if (a->sender) {
    if (!encode_message(a)) { fprintf(stderr, "cloadgen: cannot encode the message\n"); return 2; }
  } else {
    a->lat = malloc(sizeof *a->lat * (size_t)a->count);
    a->bufcap = a->body_size + 1024;
    a->buf = malloc(a->bufcap);
  }
  a->start_mono = mono();
  a->deadline = a->start_mono + a->timeout;
  a->proactor = pn_proactor();
  pn_proactor_set_timeout(a->proactor, TICK_MS);
  if (a->listen) {
    a->listener = pn_listener();
    pn_proactor_listen(a->proactor, a->listener, a->url, 16);
  } else {
    pn_transport_t *t = pn_transport();
    pn_sasl_allowed_mechs(pn_sasl(t), "ANONYMOUS");
    pn_proactor_connect2(a->proactor, NULL, t, a->url);
  }
  bool running = true;
  while (running) {
    pn_event_batch_t *batch = pn_proactor_wait(a->proactor);
    pn_event_t *e;
    while ((e = pn_event_batch_next(batch))) {
      if (pn_event_type(e) == PN_PROACTOR_INACTIVE) running = false;
      else handle(a, e);
    }
    pn_proactor_done(a->proactor, batch);
    if (mono() > a->deadline + 10) break;   /* the close itself hangs: give up */
  }
  if (!a->have_ru1) { getrusage(RUSAGE_SELF, &a->ru1); a->have_ru1 = true; }
  if (a->sender && !a->presettled && a->settled < a->count && !a->error[0])
    set_error(a, "connection ended before every delivery was settled%s%s", NULL, NULL);
  summary(a);
  FILE *f = a->out ? fopen(a->out, "a") : stdout;
  if (!f) { perror(a->out); return 1; }
  write_result(a, f);
  if (f != stdout) fclose(f);
  pn_proactor_free(a->proactor);
  return a->error[0] ? 1 : 0;
}
