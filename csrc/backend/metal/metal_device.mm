// MetalDevice over Apple's Metal API. Objective-C++ with manual
// retain/release (no ARC): every object we create or retain is released in
// the same class's destructor, and calls that return autoreleased objects run
// inside @autoreleasepool. The same file compiles on Linux against the
// emulator's fake Metal and Foundation headers, so its logic is exercised by
// the end-to-end tests there too.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <cstring>
#include <new>
#include <string>
#include <unordered_map>

#include "backend/metal/metal_device.h"
#include "backend/metal/ops_encode.h"
#include "core/error.h"

namespace muser::metal {
namespace {

std::string describe(NSError* error) {
  if (error == nil) return "no error details";
  NSString* text = [error localizedDescription];
  return text != nil ? std::string([text UTF8String]) : "no error details";
}

using PipelineMap = std::unordered_map<std::string, id<MTLComputePipelineState>>;

class MetalEncoder final : public KernelEncoder {
 public:
  MetalEncoder(id<MTLComputeCommandEncoder> encoder, const PipelineMap& pipelines)
      : encoder_(encoder), pipelines_(pipelines) {}

  void set_pipeline(const char* kernel_name) override {
    auto it = pipelines_.find(kernel_name);
    if (it == pipelines_.end()) throw InternalError(std::string("[metal] no pipeline for kernel ") + kernel_name);
    [encoder_ setComputePipelineState:it->second];
  }
  void set_buffer(uint32_t index, const DeviceBuffer& buffer, size_t offset) override {
    [encoder_ setBuffer:(id<MTLBuffer>)buffer.handle offset:offset atIndex:index];
  }
  void set_bytes(uint32_t index, const void* bytes, size_t n) override {
    [encoder_ setBytes:bytes length:n atIndex:index];
  }
  void set_threadgroup_memory(uint32_t index, size_t n) override {
    // Metal wants threadgroup memory lengths in multiples of 16 bytes.
    [encoder_ setThreadgroupMemoryLength:(n + 15) / 16 * 16 atIndex:index];
  }
  void dispatch(GridSize groups, GridSize threads) override {
    [encoder_ dispatchThreadgroups:MTLSizeMake(groups.x, groups.y, groups.z)
             threadsPerThreadgroup:MTLSizeMake(threads.x, threads.y, threads.z)];
  }

 private:
  id<MTLComputeCommandEncoder> encoder_;  // owned by MetalBatch
  const PipelineMap& pipelines_;
};

class MetalBatch final : public CommandBatch {
 public:
  MetalBatch(id<MTLCommandQueue> queue, const PipelineMap& pipelines) {
    @autoreleasepool {
      command_buffer_ = [[queue commandBuffer] retain];
      encoder_ = [[command_buffer_ computeCommandEncoder] retain];
    }
    if (command_buffer_ == nil || encoder_ == nil) {
      [encoder_ release];
      [command_buffer_ release];
      throw InternalError("[metal] could not create a command buffer");
    }
    wrapper_ = new MetalEncoder(encoder_, pipelines);
  }

  ~MetalBatch() override {
    delete wrapper_;
    // A batch abandoned by an exception must still end its encoder.
    if (!ended_) [encoder_ endEncoding];
    [encoder_ release];
    [command_buffer_ release];
  }

  KernelEncoder& encoder() override { return *wrapper_; }

  void commit_and_wait() override {
    [encoder_ endEncoding];
    ended_ = true;
    [command_buffer_ commit];
    [command_buffer_ waitUntilCompleted];
    if ([command_buffer_ status] == MTLCommandBufferStatusError) {
      std::string message;
      @autoreleasepool {
        message = describe([command_buffer_ error]);
      }
      throw InternalError("[metal] command buffer failed: " + message);
    }
  }

 private:
  id<MTLCommandBuffer> command_buffer_ = nil;
  id<MTLComputeCommandEncoder> encoder_ = nil;
  MetalEncoder* wrapper_ = nullptr;
  bool ended_ = false;
};

class MetalDeviceImpl final : public MetalDevice {
 public:
  MetalDeviceImpl() {
    device_ = MTLCreateSystemDefaultDevice();  // +1 (create rule)
    if (device_ == nil) throw InvalidArgument("[metal] no Metal device on this machine");
    try {
      build_pipelines();
      queue_ = [device_ newCommandQueue];
      if (queue_ == nil) throw InternalError("[metal] could not create a command queue");
    } catch (...) {
      release_all();
      throw;
    }
  }

  ~MetalDeviceImpl() override { release_all(); }

  std::string name() const override {
    @autoreleasepool {
      NSString* n = [device_ name];
      return n != nil ? std::string([n UTF8String]) : std::string("Metal device");
    }
  }

  DeviceBuffer new_buffer(size_t bytes) override {
    id<MTLBuffer> buffer = [device_ newBufferWithLength:(bytes == 0 ? 16 : bytes)
                                                options:MTLResourceStorageModeShared];
    if (buffer == nil) throw std::bad_alloc();
    std::memset([buffer contents], 0, bytes);
    return DeviceBuffer{(void*)buffer, bytes};
  }

  void release_buffer(DeviceBuffer& buffer) noexcept override {
    if (buffer.handle != nullptr) [(id<MTLBuffer>)buffer.handle release];
    buffer.handle = nullptr;
    buffer.bytes = 0;
  }

  void* contents(const DeviceBuffer& buffer) const override { return [(id<MTLBuffer>)buffer.handle contents]; }

  std::unique_ptr<CommandBatch> begin_batch() override { return std::make_unique<MetalBatch>(queue_, pipelines_); }

 private:
  // Errors are thrown after the autorelease pool is drained: an exception
  // leaving @autoreleasepool would skip the drain under manual retain/release.
  void build_pipelines() {
    std::string failure;
    @autoreleasepool {
      NSString* source = [NSString stringWithUTF8String:embedded_kernel_source()];
      MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
      [options setLanguageVersion:MTLLanguageVersion3_0];
      // Precise exp/tanh and IEEE infinities: closer to the CPU reference.
      [options setFastMathEnabled:NO];
      NSError* error = nil;
      library_ = [device_ newLibraryWithSource:source options:options error:&error];
      [options release];
      if (library_ == nil) failure = "[metal] the kernel library did not compile: " + describe(error);
      for (const char* const* name = kernel_names(); failure.empty() && *name != nullptr; ++name) {
        id<MTLFunction> function = [library_ newFunctionWithName:[NSString stringWithUTF8String:*name]];
        if (function == nil) {
          failure = std::string("[metal] kernel library lacks ") + *name;
          break;
        }
        id<MTLComputePipelineState> pipeline = [device_ newComputePipelineStateWithFunction:function error:&error];
        [function release];
        if (pipeline == nil) {
          failure = std::string("[metal] pipeline ") + *name + " failed: " + describe(error);
          break;
        }
        pipelines_[*name] = pipeline;
        if ([pipeline maxTotalThreadsPerThreadgroup] < kMaxThreadsPerThreadgroup) {
          failure = std::string("[metal] pipeline ") + *name + " allows " +
                    std::to_string([pipeline maxTotalThreadsPerThreadgroup]) +
                    " threads per threadgroup, the op logic dispatches up to " +
                    std::to_string(kMaxThreadsPerThreadgroup);
        }
      }
    }
    if (!failure.empty()) throw InternalError(failure);
  }

  void release_all() noexcept {
    for (auto& entry : pipelines_) [entry.second release];
    pipelines_.clear();
    [queue_ release];
    [library_ release];
    [device_ release];
    queue_ = nil;
    library_ = nil;
    device_ = nil;
  }

  id<MTLDevice> device_ = nil;
  id<MTLLibrary> library_ = nil;
  id<MTLCommandQueue> queue_ = nil;
  PipelineMap pipelines_;
};

}  // namespace

std::string MetalDevice::probe() {
  @autoreleasepool {
    id<MTLDevice> device = MTLCreateSystemDefaultDevice();
    if (device == nil) return "no Metal device on this machine";
    [device release];
    return "";
  }
}

std::unique_ptr<MetalDevice> MetalDevice::open() { return std::make_unique<MetalDeviceImpl>(); }

}  // namespace muser::metal
