// A minimal stand-in for Apple's Metal framework, backed by the emulator
// (tests/metal_emulator/emulator.h): the subset csrc/backend/metal/*.mm
// uses, with Metal's names, protocols and ownership rules. Implemented in
// fake_metal.mm.
//
// - newLibraryWithSource: keeps the source; newFunctionWithName: succeeds only
//   for a kernel that the source declares ("kernel void NAME(") AND the
//   emulator has compiled, so the embedded source and the kernels agree.
// - Command buffers record dispatches (with copies of the bindings, as Metal
//   does) and run them on the emulator at commit; a dispatch the emulator
//   rejects puts the command buffer in MTLCommandBufferStatusError with the
//   emulator's message as its error.
// - MUSER_FAKE_METAL_ORDER=forward|reverse|random picks the thread order
//   (default forward); MUSER_FAKE_METAL_NO_DEVICE=1 makes
//   MTLCreateSystemDefaultDevice return nil.
#pragma once

#import <Foundation/Foundation.h>

typedef struct {
  NSUInteger width, height, depth;
} MTLSize;

static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize size = {width, height, depth};
  return size;
}

typedef NSUInteger MTLResourceOptions;
enum { MTLResourceStorageModeShared = 0 };

typedef NSUInteger MTLLanguageVersion;
enum { MTLLanguageVersion3_0 = (3 << 16) };

typedef NSUInteger MTLCommandBufferStatus;
enum {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
};

@protocol MTLFunction <NSObject>
@end

@protocol MTLComputePipelineState <NSObject>
- (NSUInteger)maxTotalThreadsPerThreadgroup;
@end

@protocol MTLLibrary <NSObject>
- (id<MTLFunction>)newFunctionWithName:(NSString*)name;
@end

@protocol MTLBuffer <NSObject>
- (void*)contents;
- (NSUInteger)length;
@end

@protocol MTLComputeCommandEncoder <NSObject>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroups threadsPerThreadgroup:(MTLSize)threads;
- (void)endEncoding;
@end

@protocol MTLCommandBuffer <NSObject>
- (id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (void)commit;
- (void)waitUntilCompleted;
- (MTLCommandBufferStatus)status;
- (NSError*)error;
@end

@protocol MTLCommandQueue <NSObject>
- (id<MTLCommandBuffer>)commandBuffer;
@end

@interface MTLCompileOptions : NSObject {
  MTLLanguageVersion muser_language_version_;
  BOOL muser_fast_math_;
}
- (void)setLanguageVersion:(MTLLanguageVersion)version;
- (void)setFastMathEnabled:(BOOL)enabled;
@end

@protocol MTLDevice <NSObject>
- (NSString*)name;
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(NSError**)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)function error:(NSError**)error;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLCommandQueue>)newCommandQueue;
@end

extern "C" id<MTLDevice> MTLCreateSystemDefaultDevice(void);
