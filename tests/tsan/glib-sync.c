// ThreadSanitizer and GLib: what GLib's locks, reference counts and
// slices order, told to ThreadSanitizer in the test processes of a
// -Db_sanitize=thread build (docs/development.md; tests/meson.build
// preloads it).
//
// GLib and GStreamer from a distribution are not built with the sanitizer.
// On Linux, GLib's GMutex and GCond are futexes driven by atomic operations
// inside libglib, which ThreadSanitizer does not see (it sees pthread's
// mutexes, not these), so without this every field kept under
// GST_OBJECT_LOCK would look like a data race between the application's
// thread and the streaming thread; and an object freed by the last of
// several threads that dropped references to it would look like a race
// between the free and the other threads' writes. This library, preloaded
// (LD_PRELOAD) into a process built with -fsanitize=thread, takes the place
// of those functions for every caller outside libglib (the plugin, the
// tests and GStreamer's libraries call them through the PLT; libglib's own
// calls stay inside it, which tests/tsan/suppressions.txt deals with),
// calls GLib's own through dlsym(RTLD_NEXT), and marks the happens-before
// edges with ThreadSanitizer's annotations. It orders only what GLib
// orders: a race in the plugin's own code is still reported.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <glib-object.h>
#include <string.h>

void __tsan_acquire(void *addr);
void __tsan_release(void *addr);

// real_NAME: GLib's function NAME (the next definition after this
// library's), looked up at the first call (in any thread: kept atomically).
#define REAL(name)                                                                 \
  static __typeof__(&name) kept_##name;                                            \
  __typeof__(&name) real_##name = __atomic_load_n(&kept_##name, __ATOMIC_RELAXED); \
  if (!real_##name) {                                                              \
    real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name);                      \
    __atomic_store_n(&kept_##name, real_##name, __ATOMIC_RELAXED);                 \
  }

void g_mutex_lock(GMutex *mutex) {
  REAL(g_mutex_lock);
  real_g_mutex_lock(mutex);
  __tsan_acquire(mutex);
}

gboolean g_mutex_trylock(GMutex *mutex) {
  REAL(g_mutex_trylock);
  const gboolean taken = real_g_mutex_trylock(mutex);
  if (taken) __tsan_acquire(mutex);
  return taken;
}

void g_mutex_unlock(GMutex *mutex) {
  REAL(g_mutex_unlock);
  __tsan_release(mutex);
  real_g_mutex_unlock(mutex);
}

// A wait lets the mutex go and takes it again.
void g_cond_wait(GCond *cond, GMutex *mutex) {
  REAL(g_cond_wait);
  __tsan_release(mutex);
  real_g_cond_wait(cond, mutex);
  __tsan_acquire(mutex);
}

gboolean g_cond_wait_until(GCond *cond, GMutex *mutex, gint64 end_time) {
  REAL(g_cond_wait_until);
  __tsan_release(mutex);
  const gboolean signalled = real_g_cond_wait_until(cond, mutex, end_time);
  __tsan_acquire(mutex);
  return signalled;
}

// GRecMutex is a pthread mutex, which ThreadSanitizer sees, allocated by
// g_rec_mutex_init(); but a mutex made in one thread and first locked in
// another (a GstTask's stream lock, which its thread takes first, handed
// over through GLib's own thread pool) would look like a race between
// pthread_mutex_init() and pthread_mutex_lock(): the mutex made happens
// before any lock of it.
void g_rec_mutex_init(GRecMutex *mutex) {
  REAL(g_rec_mutex_init);
  real_g_rec_mutex_init(mutex);
  __tsan_release(mutex);
}

void g_rec_mutex_lock(GRecMutex *mutex) {
  REAL(g_rec_mutex_lock);
  __tsan_acquire(mutex);
  real_g_rec_mutex_lock(mutex);
  __tsan_acquire(mutex);
}

gboolean g_rec_mutex_trylock(GRecMutex *mutex) {
  REAL(g_rec_mutex_trylock);
  __tsan_acquire(mutex);
  const gboolean taken = real_g_rec_mutex_trylock(mutex);
  if (taken) __tsan_acquire(mutex);
  return taken;
}

void g_rec_mutex_unlock(GRecMutex *mutex) {
  REAL(g_rec_mutex_unlock);
  __tsan_release(mutex);
  real_g_rec_mutex_unlock(mutex);
}

// A value made once (g_once_init_enter(), whose first test is an atomic
// load in the caller's code): what the thread that made it wrote happens
// before any thread's use of it.
void(g_once_init_leave)(volatile void *location, gsize result) {
  REAL(g_once_init_leave);
  __tsan_release((void *)location);
  real_g_once_init_leave(location, result);
}

// GSlice (GLib 2.74) hands a block freed in one thread to an allocation in
// another through caches kept under GLib's own locks, which ThreadSanitizer
// does not see either (its allocator does not hand out these blocks): a
// block's free happens before its next allocation. (Only the calls from
// outside libglib: a GError or GList that GLib allocates itself is not
// seen.)
gpointer g_slice_alloc(gsize size) {
  REAL(g_slice_alloc);
  gpointer block = real_g_slice_alloc(size);
  __tsan_acquire(block);
  return block;
}

gpointer g_slice_alloc0(gsize size) {
  REAL(g_slice_alloc);
  gpointer block = real_g_slice_alloc(size);
  __tsan_acquire(block);
  memset(block, 0, size);
  return block;
}

gpointer g_slice_copy(gsize size, gconstpointer source) {
  REAL(g_slice_alloc);
  gpointer block = real_g_slice_alloc(size);
  __tsan_acquire(block);
  memcpy(block, source, size);
  return block;
}

void g_slice_free1(gsize size, gpointer block) {
  REAL(g_slice_free1);
  if (block) __tsan_release(block);
  real_g_slice_free1(size, block);
}

// A reference dropped: whatever this thread did to the object happens
// before its end, in whichever thread drops the last reference (each drop
// releases, and acquires what the drops before it released).
typedef struct _GstMiniObject GstMiniObject;
void gst_mini_object_unref(GstMiniObject *object);

void gst_mini_object_unref(GstMiniObject *object) {
  REAL(gst_mini_object_unref);
  __tsan_release(object);
  __tsan_acquire(object);
  real_gst_mini_object_unref(object);
}

void g_object_unref(gpointer object) {
  REAL(g_object_unref);
  __tsan_release(object);
  __tsan_acquire(object);
  real_g_object_unref(object);
}
