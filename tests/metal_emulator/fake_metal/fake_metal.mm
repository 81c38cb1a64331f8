// The fake Foundation and Metal of Foundation/Foundation.h and Metal/Metal.h,
// over the emulator. Manual retain/release throughout, like the host code.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emulator.h"

namespace {

long g_live_objects = 0;
thread_local NSAutoreleasePool* g_current_pool = nil;

char* copy_text(const char* text) {
  const size_t n = std::strlen(text);
  char* out = static_cast<char*>(std::malloc(n + 1));
  std::memcpy(out, text, n + 1);
  return out;
}

}  // namespace

extern "C" long fake_metal_live_objects(void) { return g_live_objects; }

// ---- Foundation

@implementation NSObject
+ (id)alloc {
  NSObject* object = (NSObject*)class_createInstance(self, 0);
  object->muser_retain_count_ = 1;
  ++g_live_objects;
  return object;
}
- (id)init {
  return self;
}
- (id)retain {
  ++muser_retain_count_;
  return self;
}
- (oneway void)release {
  if (muser_retain_count_ == 0) {
    std::fprintf(stderr, "fake Metal: release of a deallocated %s\n", class_getName(object_getClass(self)));
    std::abort();
  }
  if (--muser_retain_count_ == 0) [self dealloc];
}
- (id)autorelease {
  if (g_current_pool == nil) {
    // Cocoa logs and leaks here; the leak shows in fake_metal_live_objects().
    std::fprintf(stderr, "fake Metal: %s autoreleased with no pool in place\n", class_getName(object_getClass(self)));
    return self;
  }
  static_cast<std::vector<id>*>(g_current_pool->muser_objects_)->push_back(self);
  return self;
}
- (NSUInteger)retainCount {
  return muser_retain_count_;
}
- (void)dealloc {
  --g_live_objects;
  object_dispose(self);
}
@end

@implementation NSAutoreleasePool
- (id)init {
  muser_objects_ = new std::vector<id>();
  muser_outer_ = g_current_pool;
  g_current_pool = self;
  return self;
}
- (void)drain {
  auto* objects = static_cast<std::vector<id>*>(muser_objects_);
  g_current_pool = muser_outer_;
  for (id object : *objects) [object release];
  delete objects;
  muser_objects_ = nullptr;
  [self release];
}
@end

@implementation NSString
+ (NSString*)stringWithUTF8String:(const char*)text {
  NSString* s = [[NSString alloc] init];
  s->muser_utf8_ = copy_text(text);
  return [s autorelease];
}
- (const char*)UTF8String {
  return muser_utf8_;
}
- (void)dealloc {
  std::free(muser_utf8_);
  [super dealloc];
}
@end

@implementation NSError
+ (NSError*)muserErrorWithText:(const char*)text {
  NSError* e = [[NSError alloc] init];
  e->muser_description_ = [[NSString stringWithUTF8String:text] retain];
  return [e autorelease];
}
- (NSString*)localizedDescription {
  return muser_description_;
}
- (void)dealloc {
  [muser_description_ release];
  [super dealloc];
}
@end

// ---- Metal

@implementation MTLCompileOptions
- (void)setLanguageVersion:(MTLLanguageVersion)version {
  muser_language_version_ = version;
}
- (void)setFastMathEnabled:(BOOL)enabled {
  muser_fast_math_ = enabled;
}
@end

@interface FakeFunction : NSObject <MTLFunction> {
 @public
  const mtlemu::KernelInfo* kernel_;
}
@end
@implementation FakeFunction
@end

@interface FakePipeline : NSObject <MTLComputePipelineState> {
 @public
  const mtlemu::KernelInfo* kernel_;
}
@end
@implementation FakePipeline
- (NSUInteger)maxTotalThreadsPerThreadgroup {
  return mtlemu::kMaxThreadsPerThreadgroup;
}
@end

@interface FakeLibrary : NSObject <MTLLibrary> {
 @public
  char* source_;
}
@end
@implementation FakeLibrary
- (id<MTLFunction>)newFunctionWithName:(NSString*)name {
  const std::string wanted = std::string("kernel void ") + [name UTF8String] + "(";
  if (std::strstr(source_, wanted.c_str()) == nullptr) return nil;
  const mtlemu::KernelInfo* kernel = mtlemu::find_kernel([name UTF8String]);
  if (kernel == nullptr) return nil;
  FakeFunction* f = [[FakeFunction alloc] init];
  f->kernel_ = kernel;
  return f;
}
- (void)dealloc {
  std::free(source_);
  [super dealloc];
}
@end

@interface FakeBuffer : NSObject <MTLBuffer> {
 @public
  unsigned char* data_;
  NSUInteger length_;
}
@end
@implementation FakeBuffer
- (void*)contents {
  return data_;
}
- (NSUInteger)length {
  return length_;
}
- (void)dealloc {
  delete[] data_;
  [super dealloc];
}
@end

namespace {

// One recorded dispatch, with its own copies of the set_bytes data and a
// retain on every buffer it binds (Metal keeps them alive until completion).
struct Recorded {
  const mtlemu::KernelInfo* kernel = nullptr;
  mtlemu::Bindings bindings;
  std::vector<unsigned char> inline_bytes[mtlemu::kMaxBindings];
  std::vector<id> retained;
  mtlemu::Dim3 groups, threads;
};

struct EncoderState {
  const mtlemu::KernelInfo* kernel = nullptr;
  mtlemu::Bindings bindings;
  std::vector<unsigned char> inline_bytes[mtlemu::kMaxBindings];
  id buffers[mtlemu::kMaxBindings] = {};
  bool ended = false;
  std::string misuse;  // first API misuse, reported as the command buffer's error
};

}  // namespace

@interface FakeCommandBuffer : NSObject <MTLCommandBuffer> {
 @public
  std::vector<Recorded*>* recorded_;
  MTLCommandBufferStatus status_;
  NSError* error_;
  std::string* misuse_;
  BOOL has_encoder_;
}
@end

@interface FakeEncoder : NSObject <MTLComputeCommandEncoder> {
 @public
  FakeCommandBuffer* owner_;  // not retained: Metal's encoder lives inside its command buffer
  EncoderState* state_;
}
@end

@implementation FakeEncoder
- (void)note:(const std::string&)what {
  if (state_->misuse.empty()) state_->misuse = what;
}
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state {
  state_->kernel = ((FakePipeline*)state)->kernel_;
}
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index {
  if (index >= mtlemu::kMaxBindings) return [self note:"setBuffer: index out of range"];
  FakeBuffer* b = (FakeBuffer*)buffer;
  if (offset > b->length_) return [self note:"setBuffer: offset past the end of the buffer"];
  mtlemu::Bindings::Buffer& slot = state_->bindings.buffers[index];
  slot.data = b->data_ + offset;
  slot.bytes = b->length_ - offset;
  slot.bound = true;
  slot.inline_bytes = false;
  state_->buffers[index] = b;
}
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index {
  if (index >= mtlemu::kMaxBindings) return [self note:"setBytes: index out of range"];
  // Metal limits setBytes to 4 KiB.
  if (length > 4096) return [self note:"setBytes: more than 4096 bytes"];
  const auto* p = static_cast<const unsigned char*>(bytes);
  state_->inline_bytes[index].assign(p, p + length);
  mtlemu::Bindings::Buffer& slot = state_->bindings.buffers[index];
  slot.data = nullptr;  // fixed up per dispatch
  slot.bytes = length;
  slot.bound = true;
  slot.inline_bytes = true;
  state_->buffers[index] = nil;
}
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index {
  if (index >= mtlemu::kMaxBindings) return [self note:"setThreadgroupMemoryLength: index out of range"];
  if (length % 16 != 0) return [self note:"setThreadgroupMemoryLength: length must be a multiple of 16"];
  state_->bindings.threadgroup_bytes[index] = length;
  state_->bindings.threadgroup_set[index] = true;
}
- (void)dispatchThreadgroups:(MTLSize)groups threadsPerThreadgroup:(MTLSize)threads {
  if (state_->ended) return [self note:"dispatch after endEncoding"];
  if (state_->kernel == nullptr) return [self note:"dispatch without a pipeline"];
  auto* r = new Recorded();
  r->kernel = state_->kernel;
  r->bindings = state_->bindings;
  for (unsigned i = 0; i < mtlemu::kMaxBindings; ++i) {
    r->inline_bytes[i] = state_->inline_bytes[i];
    if (state_->bindings.buffers[i].bound && state_->buffers[i] != nil) {
      r->retained.push_back([state_->buffers[i] retain]);
    }
  }
  r->groups = {static_cast<uint32_t>(groups.width), static_cast<uint32_t>(groups.height),
               static_cast<uint32_t>(groups.depth)};
  r->threads = {static_cast<uint32_t>(threads.width), static_cast<uint32_t>(threads.height),
                static_cast<uint32_t>(threads.depth)};
  owner_->recorded_->push_back(r);
}
- (void)endEncoding {
  if (state_->ended) return [self note:"endEncoding called twice"];
  state_->ended = true;
  if (!state_->misuse.empty() && owner_->misuse_->empty()) *owner_->misuse_ = state_->misuse;
}
- (void)dealloc {
  if (!state_->ended) {
    std::fprintf(stderr, "fake Metal: compute encoder released without endEncoding\n");
    std::abort();  // Metal's validation layer stops here too
  }
  delete state_;
  [super dealloc];
}
@end

@implementation FakeCommandBuffer
- (id<MTLComputeCommandEncoder>)computeCommandEncoder {
  FakeEncoder* e = [[FakeEncoder alloc] init];
  e->owner_ = self;
  e->state_ = new EncoderState();
  has_encoder_ = YES;
  return [e autorelease];
}
- (void)commit {
  status_ = MTLCommandBufferStatusCommitted;
  const char* order_name = std::getenv("MUSER_FAKE_METAL_ORDER");
  const char* seed_text = std::getenv("MUSER_FAKE_METAL_SEED");
  std::string failure = *misuse_;
  try {
    const mtlemu::Order order = mtlemu::parse_order(order_name != nullptr ? order_name : "forward");
    const uint64_t seed = seed_text != nullptr ? std::strtoull(seed_text, nullptr, 10) : 1;
    for (size_t i = 0; failure.empty() && i < recorded_->size(); ++i) {
      Recorded* r = (*recorded_)[i];
      for (unsigned b = 0; b < mtlemu::kMaxBindings; ++b) {
        if (r->bindings.buffers[b].inline_bytes) r->bindings.buffers[b].data = r->inline_bytes[b].data();
      }
      mtlemu::dispatch(*r->kernel, r->bindings, r->groups, r->threads, order, seed + i);
    }
  } catch (const mtlemu::EmulatorError& e) {
    failure = e.what();
  }
  [self releaseRecorded];
  if (failure.empty()) {
    status_ = MTLCommandBufferStatusCompleted;
  } else {
    status_ = MTLCommandBufferStatusError;
    error_ = [[NSError muserErrorWithText:failure.c_str()] retain];
  }
}
- (void)releaseRecorded {
  for (Recorded* r : *recorded_) {
    for (id object : r->retained) [object release];
    delete r;
  }
  recorded_->clear();
}
- (void)waitUntilCompleted {
  if (status_ == MTLCommandBufferStatusNotEnqueued) {
    std::fprintf(stderr, "fake Metal: waitUntilCompleted on a command buffer never committed\n");
    std::abort();  // real Metal would wait forever
  }
}
- (MTLCommandBufferStatus)status {
  return status_;
}
- (NSError*)error {
  return error_;
}
- (void)dealloc {
  [self releaseRecorded];
  delete recorded_;
  delete misuse_;
  [error_ release];
  [super dealloc];
}
@end

@interface FakeQueue : NSObject <MTLCommandQueue>
@end
@implementation FakeQueue
- (id<MTLCommandBuffer>)commandBuffer {
  FakeCommandBuffer* cb = [[FakeCommandBuffer alloc] init];
  cb->recorded_ = new std::vector<Recorded*>();
  cb->misuse_ = new std::string();
  cb->status_ = MTLCommandBufferStatusNotEnqueued;
  cb->error_ = nil;
  return [cb autorelease];
}
@end

@interface FakeDevice : NSObject <MTLDevice>
@end
@implementation FakeDevice
- (NSString*)name {
  return [NSString stringWithUTF8String:"muser fake Metal device (CPU emulator)"];
}
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(NSError**)error {
  if (source == nil || std::strstr([source UTF8String], "kernel void ") == nullptr) {
    if (error != nullptr) *error = [NSError muserErrorWithText:"fake Metal: the source declares no kernel"];
    return nil;
  }
  FakeLibrary* library = [[FakeLibrary alloc] init];
  library->source_ = copy_text([source UTF8String]);
  return library;
}
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)function error:(NSError**)error {
  FakePipeline* p = [[FakePipeline alloc] init];
  p->kernel_ = ((FakeFunction*)function)->kernel_;
  return p;
}
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options {
  FakeBuffer* b = [[FakeBuffer alloc] init];
  // Exactly `length` bytes, so AddressSanitizer catches a kernel reading past it.
  b->data_ = new unsigned char[length == 0 ? 1 : length];
  std::memset(b->data_, 0xa5, length);  // Metal does not promise zeros
  b->length_ = length;
  return b;
}
- (id<MTLCommandQueue>)newCommandQueue {
  return [[FakeQueue alloc] init];
}
@end

extern "C" id<MTLDevice> MTLCreateSystemDefaultDevice(void) {
  const char* none = std::getenv("MUSER_FAKE_METAL_NO_DEVICE");
  if (none != nullptr && std::strcmp(none, "1") == 0) return nil;
  return [[FakeDevice alloc] init];
}
